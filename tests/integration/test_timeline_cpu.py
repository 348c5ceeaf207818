"""--trace and --plot on CPU emulation, driven in-process as a user's command line."""

from __future__ import annotations

import json
import threading

import pytest

from offloadprobe.cli import main
from offloadprobe.measure import sampler as sampler_module
from offloadprobe.report.trace_format import validate

TINY = [
    "--device",
    "cpu",
    "--layers",
    "1",
    "--hidden",
    "256",
    "--heads",
    "4",
    "--vocab",
    "1024",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--cycles",
    "2",
    "--no-reference-check",
    "--no-progress",
]


def run_main(*args: str) -> int:
    """``offloadprobe run ARGS`` with its worker in this process (threads are counted here)."""
    from offloadprobe.isolation import supervisor
    from tests.fakes import InProcessChild

    with supervisor.using(InProcessChild()), pytest.raises(SystemExit) as exit_info:
        main(["run", *args])
    return exit_info.value.code


@pytest.fixture
def started_threads(monkeypatch):
    """Names of every thread, Sampler and sidecar process started during the test."""
    names: list[str] = []
    original_thread_start = threading.Thread.start
    original_sampler_start = sampler_module.Sampler.start
    original_sidecar_start = sampler_module.Sidecar.start

    def thread_start(self):
        names.append(self.name)
        return original_thread_start(self)

    def sampler_start(self):
        names.append("Sampler.start")
        return original_sampler_start(self)

    def sidecar_start(self):
        names.append("Sidecar.start")
        return original_sidecar_start(self)

    monkeypatch.setattr(threading.Thread, "start", thread_start)
    monkeypatch.setattr(sampler_module.Sidecar, "start", sidecar_start)
    monkeypatch.setattr(sampler_module.Sampler, "start", sampler_start)
    return names


def test_no_sampler_runs_without_trace_or_plot(tmp_path, started_threads):
    assert run_main(*TINY, "--json", str(tmp_path / "r.json")) == 0
    assert "Sampler.start" not in started_threads
    assert "Sidecar.start" not in started_threads
    assert "offloadprobe-sampler" not in started_threads


def test_run_trace_has_one_slice_per_phase_with_its_exact_readings(tmp_path, started_threads):
    trace, report = tmp_path / "t.json", tmp_path / "r.json"
    assert run_main(*TINY, "--json", str(report), "--trace", str(trace)) == 0
    assert "Sampler.start" in started_threads and "Sidecar.start" in started_threads
    doc = json.loads(trace.read_text())
    assert validate(doc) == []
    run = json.loads(report.read_text())["runs"][0]
    # the strategies' construction is measured first, as its own slice
    phases = [run["construction"]] + [p for c in run["cycles"] for p in c["phases"]]
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "phase"]
    assert [(e["args"]["cycle"], e["name"]) for e in slices] == [
        (p["cycle"], p["phase"]) for p in phases
    ]
    for event, phase in zip(slices, phases, strict=True):
        assert event["args"]["host peak bytes"] == phase["host"]["peak"]
        assert event["dur"] == pytest.approx(phase["seconds"] * 1e6, rel=0.05, abs=2000)
    rss = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "host RSS (sampled)"]
    # The sidecar waits while every CPU is busy; what it missed, the trace declares.
    gaps = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "sampling"]
    assert len(rss) > 10 or gaps
    assert [e["ts"] for e in rss] == sorted(e["ts"] for e in rss)
    # Samples bracket every phase: the run is covered from start to end.
    assert rss[0]["ts"] <= slices[0]["ts"] and rss[-1]["ts"] >= slices[-1]["ts"]


def test_plot_needs_a_known_suffix_before_any_work(tmp_path, capsys):
    assert run_main(*TINY, "--plot", str(tmp_path / "p.jpg")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("offloadprobe: error: --plot")
