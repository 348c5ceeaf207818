"""Plots read at a glance: the axis is the phase's, not a far series'; title, legend and
footnote each in a band of their own; compare draws the strategies' phases. Fake
timelines and records (``test_trace``), so the figures are exact."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest

from offloadprobe.core.records import PinnedReading
from offloadprobe.measure.timeline import Series, Timeline
from tests.unit.test_trace import MiB, fake_row

pytest.importorskip("matplotlib")

LONG = "mine=mymod:offload_fixed,load_fixed + none"


def _first(row, *phases: str):
    """``row`` with only these phases of its first cycle: fewer columns, a cheaper figure."""
    spans = [s for s in row.timeline.spans if s.cycle == 0 and s.phase in phases]
    return replace(row, timeline=replace(row.timeline, spans=spans))


def _with(row, name: str, label: str, shift: int):
    """``row`` plus a series ``shift`` bytes from its host RSS, sampled at the same times."""
    rss = row.timeline.series[0]
    extra = Series(
        name=name,
        label=label,
        times_ns=array("q", rss.times_ns),
        values=array("q", [v + shift for v in rss.values]),
        samples=rss.samples,
    )
    return replace(row, timeline=replace(row.timeline, series=[*row.timeline.series, extra]))


def _construction(row):
    """``row`` with a construction phase first, RSS far below its baseline meanwhile."""
    timeline: Timeline = row.timeline
    span = replace(timeline.spans[0], phase="construction", start_ns=0, end_ns=50_000_000)
    rss = timeline.series[0]
    times, values = array("q", [0, *rss.times_ns]), array("q", [10 * MiB, *rss.values])
    series = replace(rss, times_ns=times, values=values)
    return replace(row, timeline=replace(timeline, spans=[span, *timeline.spans], series=[series]))


def test_run_plot_axis_is_the_phases_and_a_far_series_is_named(tmp_path):
    """GIVEN a cgroup usage at 1.9 GiB beside an RSS of about 150 MiB WHEN run's plot is
    drawn THEN every host axis spans the RSS and its peaks (at least one payload), and the
    legend names the cgroup line, above the axis, with its value."""
    from offloadprobe.report.plot import plot_phases

    row = _with(fake_row(0, "lazy", 48 * MiB), "cgroup.current", "cgroup usage", 1800 * MiB)
    row = _first(row, "train", "offload")
    drawn = plot_phases([row], tmp_path / "run.png", title="rank 0: lazy", payload=48 * MiB)
    for (panel, _), (lo, hi) in drawn.limits.items():
        assert panel == "host" and 48 <= hi - lo < 300 and lo > 50  # MiB
    assert "cgroup usage (sampled; 1.86 GiB-1.90 GiB, above the axis where ▲)" in drawn.legend
    assert [phase for _, phase in drawn.columns] == ["train", "offload"]
    assert {o.label for o in drawn.off_axis} == {"cgroup usage"}


def test_compare_plot_has_its_own_bands_and_the_strategies_phases(tmp_path):
    """Title, legend, panels and footnote stack without overlap inside the figure; no
    construction or train column (their RSS is below compare's zero by definition), so the
    axis starts near 0; a row that page-locked memory itself says so in the pinned panel."""
    from offloadprobe.report.plot import plot_phases

    rows = [_construction(fake_row(0, "naive + none", 96 * MiB)), fake_row(1, LONG, 48 * MiB)]
    rows = [_first(r, "construction", "train", "offload") for r in rows]
    pinned = PinnedReading(reserved_after=0, in_use_after=0, reserved_peak=0, key_schema="x")
    phases = [replace(p, pinned=pinned) for p in rows[1].run.phases]
    summary = _summary(pinned_reserved_bytes=5 * MiB)
    rows[1] = replace(rows[1], run=replace(rows[1].run, phases=phases, summary=summary))
    rows[1] = _with(rows[1], "pinned.reserved", "pinned reserved", -rows[1].run.baseline_host_bytes)
    title = ", ".join(r.label for r in rows) + " · payload 48.00 MiB · " + "CPU emulation " * 12
    drawn = plot_phases(rows, tmp_path / "compare.png", title=title, payload=48 * MiB)
    f = drawn.frame
    assert 0 <= f.foot[0] < f.foot[1] <= f.panels[0] < f.panels[1] <= f.legend[0]
    assert f.legend[0] < f.legend[1] <= f.title[0] < f.title[1] <= 1
    assert drawn.columns == [(0, "offload")]
    host = [lim for (panel, _), lim in drawn.limits.items() if panel == "host"]
    assert all(-0.2 < lo <= 0 and hi > 2 for lo, hi in host)  # multiples of the payload
    assert drawn.printed == ["+2.02x", "+1.02x", "0 MiB", "+5 MiB registered"]


def _summary(**figures):
    from tests.fakes import fake_run

    return replace(fake_run("lazy").summary, **figures)
