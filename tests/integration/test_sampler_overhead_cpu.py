"""Smoke test of the sampler-overhead benchmark (the lead runs it at 5 GiB on the H200)."""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import ROOT


def test_benchmark_writes_paired_timings_and_a_verdict(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "sampler_overhead", ROOT / "benchmarks" / "sampler_overhead.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "overhead.json"
    monkeypatch.setattr(sys, "argv", ["sampler_overhead.py", "--payload", "8MiB", "--layers",
                                      "1", "--repetitions", "2", "--device", "cpu", "--settle", "0",
                                      "--out", str(out)])  # fmt: skip
    module.main()
    doc = json.loads(out.read_text())
    assert doc["versions"]["torch"] and doc["device"] == "cpu"
    for phase in ("train", "offload", "load"):
        timing = doc["phases"][phase]
        assert len(timing["off_s"]) == len(timing["on_s"]) == 2
        assert timing["median_off_s"] > 0
    if doc["within_budget"] is None:
        assert doc["verdict"].startswith("inconclusive")
    else:
        assert doc["within_budget"] == (doc["overhead_total"] <= doc["budget"])
    assert "host.rss, host.anon, host.shmem" in doc["source_read_cost_us"]
    assert doc["reads_per_s_median"]["host.rss"] > 20
