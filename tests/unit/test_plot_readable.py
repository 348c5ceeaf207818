"""Plots read at a glance: the axis is the phase's, not a far series'; title, legend and
footnote each in a band of their own; compare draws the strategies' phases. Fake
timelines and records (``test_trace``), so the figures are exact."""

from __future__ import annotations

import math
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
    legend names the cgroup line, above the axis, with its value in bytes."""
    from offloadprobe.report.plot import plot_phases

    row = _with(fake_row(0, "lazy", 48 * MiB), "cgroup.current", "cgroup usage", 1800 * MiB)
    row = _first(row, "train", "offload")
    drawn = plot_phases([row], tmp_path / "run.png", title="rank 0: lazy", payload=48 * MiB)
    for (panel, _), (lo, hi) in drawn.limits.items():
        assert panel == "host" and 1 <= hi - lo < 6 and lo > -1  # multiples of the payload
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


@pytest.fixture
def figures(monkeypatch):
    """The figures plot_phases drew, kept open to read their artists."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        plt.figure(fig.number)
        monkeypatch.undo()
        plt.close(fig)


def _ms(ns: int) -> int:
    return ns * 1_000_000


def _solid(ax, label: str):
    """The (x, y) data of the row's solid line (the one the legend names)."""
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return list(line.get_xdata()), list(line.get_ydata())


def _bars(ax) -> list[float]:
    """The heights of the exact-peak bars (``hlines``) drawn in ``ax``."""
    from matplotlib.collections import LineCollection

    return [
        float(seg[0][1])
        for c in ax.collections
        if isinstance(c, LineCollection)
        for seg in c.get_segments()
    ]


def _stale(row, gap_from: int, gap_to: int, cause: str = "busy"):
    """``row`` with no sample between ``gap_from`` and ``gap_to`` (ns) and a gap there:
    the value sampled before it is held across, as a sampler that got no CPU (``busy``)
    or one whose reads were all left out leaves it."""
    from offloadprobe.measure.timeline import Gap

    rss = row.timeline.series[0]
    kept = [
        (t, v) for t, v in zip(rss.times_ns, rss.values, strict=True) if not gap_from < t < gap_to
    ]
    series = replace(
        rss, times_ns=array("q", [t for t, _ in kept]), values=array("q", [v for _, v in kept])
    )
    gap = Gap(sampler="process", start_ns=gap_from, end_ns=gap_to, cause=cause)
    gaps = [*row.timeline.gaps, gap]
    return replace(row, timeline=replace(row.timeline, series=[series], gaps=gaps))


def test_run_plot_reads_in_multiples_of_the_payload(tmp_path, figures):
    """GIVEN naive's second copy (96 MiB over a 48 MiB payload) WHEN run's plot is drawn
    THEN its host panel is in multiples of the payload over the RSS before the first
    offload: the offload's bar stands at +2.02x, as printed, and the y label says so."""
    from offloadprobe.report.plot import plot_phases

    row = _first(fake_row(0, "naive", 96 * MiB), "train", "offload")
    drawn = plot_phases([row], tmp_path / "run.png", title="naive", payload=48 * MiB)
    assert drawn.printed == ["+2.02x"]
    (fig,) = figures
    train, offload = fig.axes[:2]
    assert _bars(offload) == [pytest.approx(97 / 48)]
    assert "x payload" in train.get_ylabel()
    _, ys = _solid(offload, "host RSS (sampled)")
    assert max(y for y in ys if y == y) == pytest.approx(2.0)  # the sampled copy, +2x


def test_a_load_panel_line_starts_where_its_bar_is_measured(tmp_path, figures):
    """GIVEN samples that stop at naive's offload peak (+2x) and resume after the load (a
    gap) WHEN compare's plot is drawn THEN the load panel's line reads the load record's own
    RSS at the load's start (+0.00x over the baseline the bar is drawn on, not the +2x held
    from the offload), and no stretch of it is solid: nothing was sampled there."""
    from offloadprobe.report.plot import plot_phases

    rows = [fake_row(0, "naive", 96 * MiB), fake_row(1, "lazy", 48 * MiB)]
    rows = [_first(r, "offload", "load") for r in rows]
    offload, load = rows[0].timeline.spans
    rows[0] = _stale(rows[0], offload.start_ns + _ms(10), load.end_ns + _ms(5))
    plot_phases(rows, tmp_path / "compare.png", title="naive, lazy", payload=48 * MiB)
    (fig,) = figures
    load_ax = fig.axes[1]
    _, ys = _solid(load_ax, "naive")
    assert all(math.isnan(y) for y in ys[:-1])
    colour = next(ln for ln in load_ax.get_lines() if ln.get_label() == "naive").get_color()
    faded = next(ln for ln in load_ax.get_lines() if ln.get_alpha() and ln.get_color() == colour)
    held = [y for x, y in zip(faded.get_xdata(), faded.get_ydata(), strict=True) if x <= 0]
    assert held[0] == pytest.approx(2.0) and held[-1] == pytest.approx(0.0)
    assert _bars(load_ax) == [pytest.approx(1 / 48)] * 2  # both loads' exact peaks: +1 MiB


def test_hatching_marks_only_where_no_row_has_samples(tmp_path):
    """GIVEN one row with a gap in its offload and another whose reads were left out over
    part of it WHEN compare's plot is drawn THEN nothing is hatched (no stretch where no
    row took a sample) and only the overlap is stippled (no row kept a sample there)."""
    from offloadprobe.report.plot import plot_phases

    rows = [_first(fake_row(i, name, 48 * MiB), "offload") for i, name in enumerate("ab")]
    start = rows[0].timeline.spans[0].start_ns
    gappy = _stale(rows[0], start + _ms(5), start + _ms(30))
    left = _stale(rows[1], start + _ms(20), start + _ms(40), cause="left out")
    drawn = plot_phases([gappy, left], tmp_path / "left.png", title="a, b", payload=48 * MiB)
    assert drawn.hatched == {("host", 0): []}
    assert drawn.stippled == {("host", 0): [(20.0, 30.0)]}


@pytest.mark.parametrize(
    ("rows", "hatched", "stippled"),
    [
        ([([(5, 30)], [(5, 30)]), ([], [])], [], []),  # the other row sampled throughout
        ([([(5, 30)], [(5, 30)]), ([(20, 40)], [(20, 40)])], [(20, 30)], []),
        ([([(5, 30)], [(5, 30)])], [(5, 30)], []),  # a lone run: its own gap
        ([([(5, 30)], [])], [], [(5, 30)]),  # read throughout, every read left out
        ([([(5, 30)], [(5, 30)]), ([(0, 40)], [(0, 10)])], [(5, 10)], [(10, 30)]),
    ],
)
def test_a_stretch_is_marked_only_where_no_row_drawn_there_has_a_sample(rows, hatched, stippled):
    """Each row: its gaps and the busy ones among them, in a window of -10 to 60 ms."""
    from offloadprobe.report.plot_gaps import marks

    window = (-10.0, 60.0)
    assert marks([(window, gaps, busy) for gaps, busy in rows]) == (hatched, stippled)
