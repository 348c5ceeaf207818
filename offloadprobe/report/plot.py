"""Timeline plots (PNG or SVG) with matplotlib, the optional ``offloadprobe[plot]`` extra.

One column per cycle and phase, each with its own time axis in milliseconds from the
phase start (phases last milliseconds to seconds, and the work between them longer:
one shared axis would draw an offload as a hairline); host, pinned and GPU panels are
stacked under each other, one row each. ``run`` draws every series of its process;
``compare`` overlays its rows, each aligned at the start of the same phase, with host
RSS over each row's own pre-offload baseline in multiples of the payload, so that a
second copy reads as +1x. Pinned pages are inside host RSS, so the panels are not
stacked as areas: that would count them twice.

Lines are samples and draw the shape only. Every number printed is an exact per-phase
reading from the records (VmHWM, allocator peaks), drawn as a thick bar over its phase.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import PhaseRecord
from offloadprobe.measure.timeline import Series
from offloadprobe.report.trace import TraceRow

PLOT_SUFFIXES = (".png", ".svg")
PHASE_COLOURS = {"train": "#dddddd", "offload": "#f6c28b", "load": "#a9cbe8", "rollout": "#b9e0a5"}
GiB, MiB = 1 << 30, 1 << 20
FOOTNOTE = (
    "lines: samples, shape only · thick bars and printed values: exact per-phase peaks "
    "(VmHWM, allocator peaks) · shaded: the phase"
)
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


def _window(series: Series, lo_ns: int, hi_ns: int) -> tuple[list[int], list[int]]:
    """The samples in [lo, hi] plus the value holding at ``lo``."""
    i = max(0, bisect.bisect_right(series.times_ns, lo_ns) - 1)
    j = bisect.bisect_right(series.times_ns, hi_ns)
    return list(series.times_ns[i:j]), list(series.values[i:j])


@dataclass(frozen=True, kw_only=True, slots=True)
class _Line:
    """One drawn series: which row, which series, its colour and legend label."""

    row: TraceRow
    name: str
    colour: Any
    label: str


@dataclass(frozen=True, kw_only=True, slots=True)
class _Panel:
    key: str
    heading: str
    names: tuple[str, ...]


def _scale(panel: str, row: TraceRow, *, relative: bool, payload: int, unit: int) -> tuple:
    """``(offset, divisor)`` turning bytes into the panel's unit for this row."""
    if relative and panel == "host":
        return _raw_baseline(row), payload
    return 0, unit


def _raw_baseline(row: TraceRow) -> int:
    """RSS just before the first offload, as the kernel counts it (the samples' frame).

    On CUDA this is the report's ``baseline_host_bytes``; in CPU emulation that figure
    leaves out the emulated device bytes, which the sampled RSS includes.
    """
    first = next((p for p in (row.run.phases if row.run else []) if p.phase == "offload"), None)
    return first.host.rss_before if first else 0


def _share_y(axes: Any, moving: list[bool]) -> None:
    """One y range per panel row over the offload/load columns (the strategies' phases);
    train columns keep their own, the framework's memory swinging far wider."""
    for row_axes in axes:
        shared = [ax for ax, m in zip(row_axes, moving, strict=True) if m] or list(row_axes)
        lo = min(ax.get_ylim()[0] for ax in shared)
        hi = max(ax.get_ylim()[1] for ax in shared)
        for ax in row_axes:
            if ax in shared:
                ax.set_ylim(lo, hi + 0.3 * (hi - lo))
            else:
                a, b = ax.get_ylim()
                ax.set_ylim(a, b + 0.3 * (b - a))


def plot_phases(rows: Sequence[TraceRow], path: Path, *, title: str, payload: int) -> None:
    """Draw ``rows`` (one: ``run``; several: ``compare``) column by column per phase."""
    plt = _pyplot()
    rows = [r for r in rows if r.timeline is not None and r.timeline.spans]
    if not rows:
        raise UsageError("no timeline with a phase was recorded: nothing to plot")
    relative = len(rows) > 1
    slots = list(dict.fromkeys((s.cycle, s.phase) for r in rows for s in r.timeline.spans))
    colours = plt.get_cmap("tab10").colors
    panels = []
    for key, heading, names in PANELS:
        names = tuple(n for n in names if any(r.timeline.get(n) for r in rows))
        if relative:
            names = names[:1]
            heading = {
                "host": "host RSS over RSS before\nthe first offload",
                "pinned": "pinned reserved",
                "gpu": "GPU allocated",
            }[key]
            if key == "host" and any(r.emulated for r in rows):
                heading += "\n(incl. emulated device)"
        if names:
            panels.append(_Panel(key=key, heading=heading, names=names))
    top = {p.key: max((max(s.values) for r in rows for n in p.names
                       if (s := r.timeline.get(n)) is not None and s.values), default=0)
           for p in panels}  # fmt: skip
    unit = {k: (GiB if v >= GiB else MiB) for k, v in top.items()}
    widths = [0.7 if phase == "train" else 1.0 for _, phase in slots]
    fig, axes = plt.subplots(
        len(panels), len(slots), figsize=(max(12, 1.9 * len(slots)), 1.7 + 2.6 * len(panels)),
        squeeze=False, gridspec_kw={"width_ratios": widths},
    )  # fmt: skip
    for col, (cycle, phase) in enumerate(slots):
        spans = {id(r): r.timeline.span(cycle, phase) for r in rows}
        longest = max((s.end_ns - s.start_ns for s in spans.values() if s), default=1)
        pad = max(longest // 4, 2_000_000)
        for panel, ax in zip(panels, axes[:, col], strict=True):
            ax.axvspan(0, longest / 1e6, color=PHASE_COLOURS.get(phase, "#eeeeee"), alpha=0.6,
                       lw=0)  # fmt: skip
            texts = []
            for index, row in enumerate(rows):
                span = spans[id(row)]
                if span is None:
                    continue
                offset, div = _scale(panel.key, row, relative=relative, payload=payload,
                                     unit=unit[panel.key])  # fmt: skip
                for name in panel.names:
                    series = row.timeline.get(name)
                    if series is None or not any(series.values):
                        continue
                    ts, vs = _window(series, span.start_ns - pad, span.start_ns + longest + pad)
                    if not vs:
                        continue
                    xs = [max(-pad, t - span.start_ns) / 1e6 for t in ts] + [(longest + pad) / 1e6]
                    ys = [(v - offset) / div for v in vs]
                    style = dict(STYLES[name]) if not relative else {"lw": 1.4}
                    style["color"] = colours[index % len(colours)] if relative else style["color"]
                    label = row.label if relative else f"{series.label} (sampled)"
                    ax.step(xs, [*ys, ys[-1]], where="post", label=label, **style)
                rec = next((p for p in (row.run.phases if row.run else [])
                            if p.cycle == cycle and p.phase == phase), None)  # fmt: skip
                peak = _exact_peak(rec, panel.key) if rec else None
                if peak is None:
                    continue
                colour = colours[index % len(colours)] if relative else "black"
                exact = (peak - offset) / div
                ax.hlines(exact, 0, (span.end_ns - span.start_ns) / 1e6, color=colour, lw=3.5,
                          label="exact phase peak" if not relative else None)  # fmt: skip
                if relative and panel.key == "host":
                    texts.append((f"{row.label} {exact:+.2f}x", colour))
                elif relative:
                    texts.append((f"{row.label} {human(peak)}", colour))
                else:
                    texts.append((human(peak), colour))
            if phase != "train" and texts:
                texts.insert(0, ("exact peak", "black"))
                for k, (text, colour) in enumerate(texts):
                    ax.text(0.04, 0.96 - 0.09 * k, text, transform=ax.transAxes, color=colour,
                            fontsize=7.5, va="top", fontweight="bold",
                            bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1})  # fmt: skip
            ax.set_xlim(-pad / 1e6, (longest + pad) / 1e6)
            ax.grid(axis="y", alpha=0.3)
            ax.tick_params(labelsize=7)
            if col == 0:
                what = "x payload" if relative and panel.key == "host" else (
                    "GiB" if unit[panel.key] == GiB else "MiB")  # fmt: skip
                ax.set_ylabel(f"{panel.heading}\n({what})", fontsize=8)
        axes[0, col].set_title(f"cycle {cycle} · {phase}", fontsize=9)
        axes[-1, col].set_xlabel("ms from phase start", fontsize=7)
    _share_y(axes, [phase != "train" for _, phase in slots])
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper right", ncols=min(len(labels), 5), fontsize=8)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.text(0.01, 0.005, FOOTNOTE, fontsize=8)
    fig.tight_layout(rect=(0, 0.02, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)
