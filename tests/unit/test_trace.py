"""Trace-event JSON and plots from fake timelines and records (exact asserts on fakes)."""

from __future__ import annotations

import sys
from array import array

import pytest

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import HostReading, PhaseRecord, RunRecord
from offloadprobe.measure.timeline import Gap, PhaseSpan, Series, Timeline
from offloadprobe.report.trace import TraceRow, trace_document
from offloadprobe.report.trace_format import validate

MiB = 1 << 20
PHASES = [(c, p) for c in range(2) for p in ("train", "offload", "load")]


def record(cycle: int, phase: str, peak: int) -> PhaseRecord:
    host = HostReading(
        rss_before=100 * MiB, rss_after=110 * MiB, peak=peak, shmem_after=0, method="vmhwm"
    )
    return PhaseRecord(
        cycle=cycle,
        phase=phase,
        seconds=0.1,
        bytes_moved=0,
        gbps=None,
        host=host,
        pinned=None,
        gpu=None,
        cgroup=None,
    )


def fake_row(pid: int, label: str, transient: int) -> TraceRow:
    """Phases 100 ms apart, 50 ms long; RSS jumps by ``transient`` inside each offload."""
    spans, times, values, records = [], array("q"), array("q"), []
    for k, (cycle, phase) in enumerate(PHASES):
        start = (k + 1) * 100_000_000
        spans.append(PhaseSpan(cycle=cycle, phase=phase, start_ns=start, end_ns=start + 50_000_000))
        bump = transient if phase == "offload" else 0
        times.extend([start, start + 10_000_000, start + 40_000_000])
        values.extend([100 * MiB, 100 * MiB + bump, 100 * MiB])
        records.append(record(cycle, phase, 100 * MiB + bump + MiB))
    series = Series(name="host.rss", label="host RSS", times_ns=times, values=values, samples=18)
    timeline = Timeline(interval_ns=1_000_000, series=[series], spans=spans, end_ns=800_000_000)
    run = RunRecord(
        strategy=label,
        description=label,
        payload_bytes=48 * MiB,
        grad_bytes=0,
        baseline_host_bytes=100 * MiB,
        gpu_baseline_bytes=None,
        phases=records,
        summary=None,
    )
    return TraceRow(pid=pid, label=label, run=run, timeline=timeline, emulated=True)


def test_trace_has_a_slice_per_phase_with_exact_args_and_counters_per_series():
    doc = trace_document([fake_row(0, "naive", 96 * MiB), fake_row(1, "lazy", 48 * MiB)])
    assert validate(doc) == []
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 2 * len(PHASES)
    naive_offload = next(e for e in slices if e["pid"] == 0 and e["name"] == "offload")
    assert naive_offload["args"]["host peak bytes"] == 197 * MiB
    assert naive_offload["dur"] == 50_000.0
    names = {
        (e["pid"], e["args"]["name"])
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {(0, "naive"), (1, "lazy")}
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == 0]
    assert {e["name"] for e in counters} == {"host RSS (sampled)"}
    assert [e["ts"] for e in counters] == sorted(e["ts"] for e in counters)
    assert "not a peak" in doc["otherData"]["offloadprobe"]


def test_sampling_gaps_are_slices_on_their_own_thread_and_hatched_on_the_plot(tmp_path):
    row = fake_row(0, "naive", 96 * MiB)
    row.timeline.gaps.append(Gap(sampler="process", start_ns=210_000_000, end_ns=235_000_000))
    # Two gaps around one sample, at times no float sum would place exactly.
    row.timeline.gaps.append(Gap(sampler="process", start_ns=1_195_513_148, end_ns=1_272_009_319))
    row.timeline.gaps.append(Gap(sampler="process", start_ns=1_272_009_319, end_ns=1_300_000_000))
    doc = trace_document([row])
    assert validate(doc) == []
    gaps = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == "sampling"]
    assert (gaps[0]["tid"], gaps[0]["ts"], gaps[0]["dur"]) == (1, 210_000, 25_000)
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X"]) == len(PHASES) + 3
    assert {g["name"] for g in gaps} == {"no samples (every CPU busy)"}
    pytest.importorskip("matplotlib")
    from offloadprobe.report.plot import plot_phases

    plot_phases([row], tmp_path / "gap.png", title="fake", payload=48 * MiB)
    assert (tmp_path / "gap.png").stat().st_size > 20_000


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"ph": "X", "name": "a", "ts": 0, "pid": 0, "tid": 0}, "missing 'dur'"),
        ({"ph": "X", "name": "a", "ts": 0, "dur": -1, "pid": 0, "tid": 0}, "dur"),
        ({"ph": "C", "name": "a", "ts": 0, "pid": 0, "args": {"v": "x"}}, "numeric"),
        ({"ph": "C", "name": "a", "ts": "0", "pid": 0, "args": {"v": 1}}, "ts"),
        ({"ph": "M", "name": "process_name", "pid": 0, "args": {}}, "args.name"),
        ({"ph": "M", "name": "bogus", "pid": 0, "args": {"name": "x"}}, "unknown metadata"),
        ({"ph": "Q", "name": "a", "ts": 0, "pid": 0}, "ph"),
        ({"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": "0", "tid": 0}, "pid"),
    ],
)
def test_validator_rejects_each_broken_field(event, problem):
    problems = validate({"traceEvents": [event]})
    assert problems and problem in problems[0]


def test_validator_rejects_partially_overlapping_slices_on_one_thread():
    a = {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 0, "tid": 0}
    b = {"ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 0, "tid": 0}
    inner = {"ph": "X", "name": "c", "ts": 2, "dur": 3, "pid": 0, "tid": 0}
    assert validate({"traceEvents": [a, inner]}) == []
    assert "overlaps" in validate({"traceEvents": [a, b]})[0]
    assert validate({"traceEvents": [a, {**b, "pid": 1}]}) == []


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_a_nontrivial_image(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    from offloadprobe.report.plot import plot_phases

    rows = [fake_row(0, "naive", 96 * MiB), fake_row(1, "lazy", 48 * MiB)]
    out = tmp_path / f"p{suffix}"
    plot_phases(rows, out, title="fake", payload=48 * MiB)
    data = out.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert b"<svg" in data[:2000]
    assert len(data) > 20_000
    single = tmp_path / f"one{suffix}"
    plot_phases(rows[:1], single, title="fake", payload=48 * MiB)
    assert single.stat().st_size > 20_000


def test_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    from offloadprobe.report.plot import check_plot_path

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"offloadprobe\[plot\]"):
        check_plot_path(tmp_path / "p.png")


def test_plot_suffix_must_be_png_or_svg(tmp_path):
    from offloadprobe.report.plot import check_plot_path

    with pytest.raises(UsageError, match=r"\.png or \.svg"):
        check_plot_path(tmp_path / "p.jpg")


def test_a_gz_trace_is_gzipped_json(tmp_path):
    import gzip
    import json

    from offloadprobe.report.trace import write_trace

    doc = trace_document([fake_row(0, "naive", 96 * MiB)])
    write_trace(doc, tmp_path / "t.json.gz")
    with gzip.open(tmp_path / "t.json.gz", "rt") as fh:
        assert json.load(fh) == doc


def _changes(series: Series) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for t, v in zip(series.times_ns, series.values, strict=True):
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_trace_reads_back_as_the_timelines_it_was_written_from(tmp_path, name):
    """What ``show --trace --plot`` draws from: each track's series by key, its phase spans
    and its gaps, on the trace's whole-microsecond clock."""
    from offloadprobe.report.trace import write_trace
    from offloadprobe.report.trace_read import read_trace

    rows = [fake_row(0, "naive", 96 * MiB), fake_row(1, "lazy", 0)]
    pinned = Series(name="pinned.reserved", label="pinned reserved")
    pinned.append(100_000_000, 8 * MiB)
    rows[1].timeline.series.append(pinned)
    rows[0].timeline.gaps.append(Gap(sampler="thread", start_ns=210_000_000, end_ns=235_000_000))
    write_trace(trace_document(rows), tmp_path / name)
    read = read_trace(tmp_path / name).timelines
    assert list(read) == ["naive", "lazy"]
    for row in rows:
        got, want = read[row.label], row.timeline
        assert [(s.cycle, s.phase, s.start_ns, s.end_ns) for s in got.spans] == [
            (s.cycle, s.phase, s.start_ns, s.end_ns) for s in want.spans
        ]
        assert [s.name for s in got.series] == [s.name for s in want.series]
        for a, b in zip(got.series, want.series, strict=True):  # the same step function
            assert _changes(a) == _changes(b)
        assert [(g.sampler, g.start_ns, g.end_ns) for g in got.gaps] == [
            (g.sampler, g.start_ns, g.end_ns) for g in want.gaps
        ]


def test_a_file_that_is_no_trace_is_bad_input(tmp_path):
    from offloadprobe.report.trace_read import read_trace

    (tmp_path / "x.json").write_text('{"runs": []}')
    with pytest.raises(UsageError, match="no traceEvents"):
        read_trace(tmp_path / "x.json")


def test_a_gap_left_out_says_so_in_the_trace_and_reads_back_as_it_was(tmp_path):
    """A stretch the sidecar read throughout but left out (CPU emulation moving its device
    pages) is not named 'every CPU busy': its slice says why, and reading the trace back
    (``show --plot``) gives each gap its cause."""
    from offloadprobe.report.trace import write_trace
    from offloadprobe.report.trace_read import read_trace

    row = fake_row(0, "naive", 96 * MiB)
    row.timeline.gaps.append(Gap(sampler="process", start_ns=210_000_000, end_ns=235_000_000))
    left = Gap(sampler="process", start_ns=300_000_000, end_ns=330_000_000, cause="left out")
    row.timeline.gaps.append(left)
    doc = trace_document([row])
    names = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "sampling"]
    assert names == [
        "no samples (every CPU busy)",
        "no samples (read while CPU emulation moved its device pages)",
    ]
    write_trace(doc, tmp_path / "t.json")
    (timeline,) = read_trace(tmp_path / "t.json").timelines.values()
    assert [g.cause for g in timeline.gaps] == ["busy", "left out"]
