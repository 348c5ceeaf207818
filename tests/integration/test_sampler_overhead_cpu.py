"""Smoke test of the sampler-overhead benchmark (the lead runs it at 5 GiB on the H200)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "sampler_overhead", ROOT / "benchmarks" / "sampler_overhead.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verdict_comes_from_the_interval_not_the_median(bench):
    assert bench.verdict(-0.01, 0.019) == "within budget"
    assert bench.verdict(0.001, 0.03) == "inconclusive"  # a median of 1% proves nothing here
    assert bench.verdict(0.021, 0.05) == "over budget"
    assert bench.bootstrap_median([0.01] * 9, seed=1) == (0.01, 0.01)
    low, high = bench.bootstrap_ratio([1.0, 2.0, 1.0, 2.0], [1.1, 2.2, 1.1, 2.2], seed=1)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)
    assert bench.decile([5.0, 1.0, 3.0]) == 1.0 and bench.decile(list(range(20))) == 1


def test_benchmark_writes_interleaved_pairs_an_interval_and_a_verdict(bench, tmp_path, monkeypatch):
    out = tmp_path / "overhead.json"
    argv = "--payload 8MiB --layers 1 --repetitions 2 --warmup 1 --device cpu --settle 0.05"
    monkeypatch.setattr(sys, "argv", ["sampler_overhead.py", *argv.split(), "--out", str(out)])
    bench.main()
    doc = json.loads(out.read_text())
    assert doc["versions"]["torch"] and doc["device"] == "cpu"
    assert doc["command"].endswith(f"--out {out}") and doc["runtime_s"] > 0
    assert len(doc["load_average_before_during_after"]) >= 2
    for part in [*doc["phases"].values(), doc["total"]]:
        assert len(part["off_s"]) == len(part["on_s"]) == 2
        assert part["median_off_s"] > 0
        low, high = part["overhead_median_ci95"]
        assert low <= part["overhead_median"] <= high
    train = doc["phases"]["train"]
    assert 0 <= train["sampler_gap_share_median"] <= 1
    assert train["process_cpu"]["median_off_s"] > 0
    assert doc["total"]["off_s"][0] == pytest.approx(
        sum(doc["phases"][p]["off_s"][0] for p in ("train", "offload", "load"))
    )
    assert doc["verdict"] == bench.verdict(*doc["overhead_ci95"])
    assert "host.rss, host.anon, host.shmem" in doc["source_read_cost_us"]
    assert doc["reads_per_s_median"]["host.rss"] > 0
    assert len(doc["sampler_notes"]) == 2 and "SCHED_IDLE" in doc["sampler_notes"][0]
