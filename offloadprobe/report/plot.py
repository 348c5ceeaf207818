"""Timeline plots (PNG or SVG) with matplotlib, the optional ``offloadprobe[plot]`` extra.

One column per cycle and phase, each with its own time axis in milliseconds from the
phase start (phases last milliseconds to seconds, and the work between them longer:
one shared axis would draw an offload as a hairline); host, pinned and GPU panels are
stacked under each other, one row each. ``run`` draws every series of its process;
``compare`` overlays its rows, each aligned at the start of the same phase. The host
panel is RSS over the row's own RSS just before its first offload, in multiples of the
payload, in ``run`` as in ``compare``: a second copy reads as +1x, naive's three copies
as +3x. Pinned pages are inside host RSS, so the panels are not stacked as areas: that
would count them twice.

Lines are samples and draw the shape only; each phase's exact readings at its start and
end pin the main line there, and a row's line is faded across its own gaps
(``plot_gaps``). Every number printed is an exact per-phase reading from the records
(VmHWM, allocator peaks), drawn as a thick bar over its phase, against the same
baseline as its line.

Each panel's y axis is set by what its phases are about: the panel's first series (host
RSS, pinned reserved, GPU allocated) inside the phase and the exact peaks, at least one
payload tall. Another series far from it (a cgroup's usage at 1.9 GiB beside an RSS of
300 MiB) is not allowed to squash it flat: it is named at the edge it lies beyond, with
its value. ``compare`` draws the phases the strategies own (offload, load, a rollout):
construction and train lie before and between them, below the zero of its host panel by
definition; ``run --plot`` draws every phase.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import PhaseRecord
from offloadprobe.measure.summary import OFFLOADS
from offloadprobe.measure.timeline import BUSY, Series
from offloadprobe.report.plot_axes import (
    Extent,
    OffAxis,
    legend_label,
    mark_off_axis,
    share_y,
)
from offloadprobe.report.plot_frame import Frame, frame
from offloadprobe.report.plot_gaps import (
    Interval,
    exact_ends,
    holes,
    marks,
    masked,
    pinned_to,
)
from offloadprobe.report.trace import TraceRow

PLOT_SUFFIXES = (".png", ".svg")
PHASE_COLOURS = {"train": "#dddddd", "offload": "#f6c28b", "load": "#a9cbe8", "rollout": "#b9e0a5"}
GiB, MiB = 1 << 30, 1 << 20
FOOTNOTE = (
    "lines: samples, shape only, pinned to each phase's exact start and end readings "
    "(faded outside the phase and where not sampled) · thick bars and printed values: "
    "exact per-phase peaks (VmHWM, allocator peaks; '+ registered': page-locked by the "
    "strategy itself, outside the allocator the pinned lines draw) · shaded: the phase"
)
GAPS_FOOTNOTE = (
    " · hatched: no sample taken (every CPU busy) · stippled: samples taken and left out "
    "(CPU emulation moving its device pages)"
)
RUN_FOOTNOTE = GAPS_FOOTNOTE
ROWS_FOOTNOTE = (
    GAPS_FOOTNOTE.replace("taken", "taken in any row", 1)
    + " · dotted: each row's phase end · the strategies' phases only "
    "(run --plot draws construction and train too)"
)
OWN_PHASES = ("offload", "load", "offload optimizer", "load optimizer", "rollout")
"""The phases compare draws: what the strategies do (the others are the framework's)."""
PANELS = (
    ("host", "host memory", ("host.rss", "host.anon", "host.shmem", "cgroup.current")),
    ("pinned", "pinned allocator", ("pinned.reserved", "pinned.in_use")),
    ("gpu", "GPU memory", ("gpu.allocated", "gpu.reserved", "gpu.device_used")),
)
STYLES = {
    "host.rss": {"color": "#1f77b4", "lw": 1.6},
    "host.anon": {"color": "#17becf", "lw": 1.0},
    "host.shmem": {"color": "#9467bd", "lw": 1.0},
    "cgroup.current": {"color": "#7f7f7f", "lw": 1.0, "ls": "--"},
    "pinned.reserved": {"color": "#d62728", "lw": 1.6},
    "pinned.in_use": {"color": "#ff9896", "lw": 1.0},
    "gpu.allocated": {"color": "#2ca02c", "lw": 1.6},
    "gpu.reserved": {"color": "#98df8a", "lw": 1.0},
    "gpu.device_used": {"color": "#8c564b", "lw": 1.0, "ls": "--"},
}


def check_plot_path(path: Path) -> None:
    """Fail before any work: a known suffix, and matplotlib installed."""
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {path}: the file name must end in .png or .svg")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'offloadprobe[plot]'") from None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def human(n: float) -> str:
    """Bytes for a plot label: GiB from 1 GiB up, else MiB."""
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB else f"{n / MiB:.0f} MiB"


def _exact_peak(rec: PhaseRecord, panel: str) -> int | None:
    if panel == "host":
        return rec.host.peak
    if panel == "pinned":
        return rec.pinned.reserved_peak if rec.pinned else None
    return rec.gpu.allocated_peak if rec.gpu else None


def registered(run: Any) -> int:
    """Bytes the run's strategies page-locked themselves (cudaHostRegister): in the
    summary's pinned figure, never in PyTorch's allocator that the pinned lines draw."""
    s = run.summary if run is not None else None
    offloads = [p for p in (run.phases if run is not None else []) if p.phase in OFFLOADS]
    if s is None or s.pinned_reserved_bytes is None or not offloads:
        return 0
    last = max(p.cycle for p in offloads)
    after = [p for p in offloads if p.cycle == last][-1].pinned
    return max(s.pinned_reserved_bytes - (after.reserved_after if after else 0), 0)


def _window(series: Series, lo_ns: int, hi_ns: int) -> tuple[list[int], list[int]]:
    """The samples in [lo, hi] plus the value holding at ``lo``."""
    i = max(0, bisect.bisect_right(series.times_ns, lo_ns) - 1)
    j = bisect.bisect_right(series.times_ns, hi_ns)
    return list(series.times_ns[i:j]), list(series.values[i:j])


@dataclass(frozen=True, kw_only=True, slots=True)
class _Panel:
    key: str
    heading: str
    names: tuple[str, ...]
    unit: int
    """Bytes per y unit (GiB or MiB); the payload for the host panel."""


def _panels(rows: Sequence[TraceRow], several: bool, payload: int) -> list[_Panel]:
    """Panels with something to draw: every series for ``run``, the main one for compare."""
    panels = []
    for key, heading, names in PANELS:
        names = tuple(n for n in names if any(r.timeline.get(n) for r in rows))
        if not names:
            continue
        top = max(  # the main series sets the unit, as it sets the axis
            (max(s.values) for r in rows if (s := r.timeline.get(names[0])) and s.values),
            default=0,
        )
        unit = GiB if top >= GiB else MiB
        if several:
            names, heading = names[:1], COMPARE_HEADINGS[key]
        if key == "host":
            unit, heading = payload, COMPARE_HEADINGS[key] if several else HOST_HEADING
            if any(r.emulated for r in rows):
                heading += "\n(incl. emulated device)"
        panels.append(_Panel(key=key, heading=heading, names=names, unit=unit))
    return panels


COMPARE_HEADINGS = {
    "host": "host RSS over RSS before\nthe first offload",
    "pinned": "pinned reserved",
    "gpu": "GPU allocated",
}
HOST_HEADING = "host memory over RSS\nbefore the first offload"


def _offset(panel: _Panel, row: TraceRow) -> int:
    """Bytes subtracted before scaling: the host panel starts at the row's baseline."""
    return _raw_baseline(row) if panel.key == "host" else 0


def _raw_baseline(row: TraceRow) -> int:
    """RSS just before the first offload, as the kernel counts it (the samples' frame).

    On CUDA this is the report's ``baseline_host_bytes``; in CPU emulation that figure
    leaves out the emulated device bytes, which the sampled RSS includes.
    """
    first = next((p for p in (row.run.phases if row.run else []) if p.phase == "offload"), None)
    return first.host.rss_before if first else 0


@dataclass(frozen=True, kw_only=True, slots=True)
class _Cell:
    """One column (a cycle's phase) of the grid: where each row's phase lies."""

    cycle: int
    phase: str
    spans: dict[int, Any]
    longest: int
    pad: int


def _record(row: TraceRow, cell: _Cell) -> PhaseRecord | None:
    phases = row.run.phases if row.run else []
    return next((p for p in phases if p.cycle == cell.cycle and p.phase == cell.phase), None)


def _draw(
    ax: Any, cell: _Cell, panel: _Panel, rows: Sequence[TraceRow], colours: Any, extent: Extent
) -> tuple[list, tuple[list[Interval], list[Interval]]]:
    """One panel of one column; returns the exact-peak labels to print there and the
    stretches no row read there (hatched: none taken; stippled: left out), and adds what
    the axis must show to ``extent``."""
    several = len(rows) > 1
    texts, windows = [], []
    for index, row in enumerate(rows):
        span = cell.spans[index]
        if span is None:
            continue
        offset = _offset(panel, row)
        colour = colours[index % len(colours)] if several else "black"
        rec = _record(row, cell)
        # Each row up to its own phase end (plus the pad): what it did next is not this phase.
        lo, hi = span.start_ns - cell.pad, span.end_ns + cell.pad
        gaps = holes(row.timeline, panel.key, lo, hi)
        busy = holes(row.timeline, panel.key, lo, hi, (BUSY,))
        windows.append(
            (
                ((lo - span.start_ns) / 1e6, (hi - span.start_ns) / 1e6),
                [((a - span.start_ns) / 1e6, (b - span.start_ns) / 1e6) for a, b in gaps],
                [((a - span.start_ns) / 1e6, (b - span.start_ns) / 1e6) for a, b in busy],
            )
        )
        for name in panel.names:
            series = row.timeline.get(name)
            if series is None or not any(series.values):
                continue
            ts, vs = _window(series, lo, hi)
            if name == panel.names[0]:
                ts, vs = pinned_to(ts, vs, span.start_ns, span.end_ns, exact_ends(rec, panel.key))
            if not vs:
                continue
            ts.append(hi)
            vs.append(vs[-1])
            xs = [max(-cell.pad, t - span.start_ns) / 1e6 for t in ts]
            ys = [(v - offset) / panel.unit for v in vs]
            style = {"lw": 1.4, "color": colour} if several else dict(STYLES[name])
            label = row.label if several else f"{series.label} (sampled)"
            # Faded outside the row's own phase and across its gaps, solid where read.
            ax.step(xs, ys, where="post", alpha=0.3, **style)
            inside = [k for k, t in enumerate(ts) if t <= span.end_ns]
            if not inside:
                continue  # first sampled after this phase
            solid_ts = [max(span.start_ns, ts[k]) for k in inside] + [span.end_ns]
            solid_ys = [ys[k] for k in inside] + [ys[inside[-1]]]
            ax.step(
                [(t - span.start_ns) / 1e6 for t in solid_ts],
                masked(solid_ts, solid_ys, gaps),
                where="post",
                label=label,
                **style,
            )
            shown = [ys[k] for k in inside if ts[k] >= span.start_ns] or [ys[inside[-1]]]
            if name == panel.names[0]:
                extent.add(*shown)
            else:
                extent.other(series.label, shown, style["color"])
        peak = _exact_peak(rec, panel.key) if rec else None
        if peak is None:
            continue
        exact = (peak - offset) / panel.unit
        extent.add(exact)
        ax.hlines(
            exact,
            0,
            (span.end_ns - span.start_ns) / 1e6,
            color=colour,
            lw=3.5,
            label=None if several else "exact phase peak",
        )
        ax.axvline((span.end_ns - span.start_ns) / 1e6, color=colour, lw=0.8, ls=":")
        # the colour names the row (the legend says whose): labels would not fit the panel
        texts.append((f"{exact:+.2f}x" if panel.key == "host" else human(peak), colour))
        locked = registered(row.run) if panel.key == "pinned" and cell.phase != "train" else 0
        if locked:
            texts.append((f"+{human(locked)} registered", colour))
    hatched, stippled = marks(windows)
    for stretches, pattern in ((hatched, "//"), (stippled, "..")):
        for a, b in stretches:  # lightly: the lines stay readable
            ax.axvspan(a, b, fc="none", ec="#c8c8c8", hatch=pattern, lw=0)
    return texts, (hatched, stippled)


def _print_peaks(ax: Any, texts: list) -> None:
    for k, (text, colour) in enumerate([("exact peak", "black"), *texts]):
        ax.text(
            0.04,
            0.96 - 0.09 * k,
            text,
            transform=ax.transAxes,
            color=colour,
            fontsize=7.5,
            va="top",
            fontweight="bold",
            bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1},
        )


def _cells(rows: Sequence[TraceRow], *, several: bool) -> list[_Cell]:
    slots = list(dict.fromkeys((s.cycle, s.phase) for r in rows for s in r.timeline.spans))
    if several:
        slots = [(c, p) for c, p in slots if p in OWN_PHASES]
    cells = []
    for cycle, phase in slots:
        spans = {i: r.timeline.span(cycle, phase) for i, r in enumerate(rows)}
        longest = max((s.end_ns - s.start_ns for s in spans.values() if s), default=1)
        cells.append(
            _Cell(
                cycle=cycle,
                phase=phase,
                spans=spans,
                longest=longest,
                pad=max(longest // 4, 2_000_000),
            )
        )
    return cells


@dataclass(frozen=True, kw_only=True, slots=True)
class Drawn:
    """What a plot shows, for checks: its columns, each panel's y range, the notes of
    series beyond an axis, and where the frame's bands went."""

    columns: list[tuple[int, str]]
    limits: dict[tuple[str, int], tuple[float, float]]
    """(panel key, column index) -> the y axis's range, in the panel's units."""
    off_axis: list[OffAxis]
    legend: list[str]
    printed: list[str]
    """The exact figures printed in the panels, in drawing order."""
    hatched: dict[tuple[str, int], list[Interval]]
    """(panel key, column index) -> where no row took a sample (ms from the phase start)."""
    stippled: dict[tuple[str, int], list[Interval]]
    """(panel key, column index) -> where no row kept one: every read was left out."""
    frame: Frame


def plot_phases(rows: Sequence[TraceRow], path: Path, *, title: str, payload: int) -> Drawn:
    """Draw ``rows`` (one: ``run``; several: ``compare``) column by column per phase."""
    plt = _pyplot()
    rows = [r for r in rows if r.timeline is not None and r.timeline.spans]
    if not rows:
        raise UsageError("no timeline with a phase was recorded: nothing to plot")
    several = len(rows) > 1
    cells, panels = _cells(rows, several=several), _panels(rows, several, payload)
    if not cells:
        raise UsageError("no offload or load phase was recorded: nothing to compare")
    colours = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(
        len(panels),
        len(cells),
        figsize=(max(12, 1.9 * len(cells)), 1.9 + 2.6 * len(panels)),
        squeeze=False,
        gridspec_kw={"width_ratios": [0.7 if c.phase == "train" else 1.0 for c in cells]},
    )
    extents: dict[Any, Extent] = {}
    printed: list[str] = []
    hatched: dict[tuple[str, int], list[Interval]] = {}
    stippled: dict[tuple[str, int], list[Interval]] = {}
    for col, cell in enumerate(cells):
        for panel, ax in zip(panels, axes[:, col], strict=True):
            ax.axvspan(
                0,
                cell.longest / 1e6,
                color=PHASE_COLOURS.get(cell.phase, "#eeeeee"),
                alpha=0.6,
                lw=0,
            )
            extents[ax] = Extent()
            texts, unread = _draw(ax, cell, panel, rows, colours, extents[ax])
            hatched[panel.key, col], stippled[panel.key, col] = unread
            if cell.phase != "train" and texts:
                _print_peaks(ax, texts)
                printed += [text for text, _ in texts]
            ax.set_xlim(-cell.pad / 1e6, (cell.longest + cell.pad) / 1e6)
            ax.grid(axis="y", alpha=0.3)
            ax.tick_params(labelsize=7)
        axes[0, col].set_title(f"cycle {cell.cycle} · {cell.phase}", fontsize=9)
        axes[-1, col].set_xlabel("ms from phase start", fontsize=7)
    for panel, ax in zip(panels, axes[:, 0], strict=True):
        what = "x payload" if panel.key == "host" else ("GiB" if panel.unit == GiB else "MiB")
        ax.set_ylabel(f"{panel.heading}\n({what})", fontsize=8)
    spans = [1.0 if p.key == "host" else payload / p.unit for p in panels]
    limits = share_y(
        axes, [c.phase not in ("train", "construction") for c in cells], extents, spans
    )
    off_axis = [
        off
        for row_axes, panel in zip(axes, panels, strict=True)
        for ax in row_axes
        for off in mark_off_axis(
            ax, extents[ax], limits[ax], panel.unit, 0 if several else _offset(panel, rows[0])
        )
    ]
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if not several:
        labels = [
            legend_label(lab.removesuffix(" (sampled)"), off_axis, human)
            if lab.endswith(" (sampled)")
            else lab
            for lab in labels
        ]
    placed = frame(
        fig,
        title=title,
        footnote=FOOTNOTE + (ROWS_FOOTNOTE if several else RUN_FOOTNOTE),
        handles=handles,
        labels=labels,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Drawn(
        columns=[(c.cycle, c.phase) for c in cells],
        limits={
            (panel.key, col): limits[axes[row, col]]
            for row, panel in enumerate(panels)
            for col in range(len(cells))
        },
        off_axis=off_axis,
        legend=labels,
        printed=printed,
        hatched=hatched,
        stippled=stippled,
        frame=placed,
    )
