"""The y axes of a plot's panels: set by what each phase is about, never by a far series.

An ``Extent`` gathers, per panel of one column, the main series' values inside the phase
and the exact peaks (what the axis must show), and the reach of every other series.
``share_y`` gives the strategies' columns of one panel row one range, at least a payload
tall; ``note_off_axis`` names a series that lies wholly beyond it, at that edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Extent:
    """What one panel of one column must show (the main series in its phase, the exact
    peaks), and the other series' reach, in the panel's units."""

    lo: float = math.inf
    hi: float = -math.inf
    others: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    """Series label -> (lowest, highest, colour) inside the phase."""

    def add(self, *values: float) -> None:
        if values:
            self.lo, self.hi = min(self.lo, *values), max(self.hi, *values)

    def other(self, label: str, values: list[float], colour: str) -> None:
        lo, hi, _ = self.others.get(label, (math.inf, -math.inf, colour))
        self.others[label] = (min(lo, *values), max(hi, *values), colour)


def share_y(
    axes: Any, moving: list[bool], extents: dict[Any, Extent], spans: list[float]
) -> dict[Any, tuple[float, float]]:
    """One y range per panel row over the offload/load columns (the strategies' phases);
    train and construction columns keep their own, the framework's memory swinging far
    wider. Each range comes from the extents, at least ``spans[row]`` tall (a payload)."""
    limits = {}
    for row_axes, span in zip(axes, spans, strict=True):
        shared = [ax for ax, m in zip(row_axes, moving, strict=True) if m] or list(row_axes)
        groups = [shared] + [[ax] for ax in row_axes if ax not in shared]
        for group in groups:
            lo = min((extents[ax].lo for ax in group), default=math.inf)
            hi = max((extents[ax].hi for ax in group), default=-math.inf)
            if not math.isfinite(lo):
                lo, hi = 0.0, 1.0
            pad = max(span - (hi - lo), 0.0) / 2
            lo, hi = lo - pad - 0.05 * span, hi + pad + 0.05 * span
            for ax in group:
                ax.set_ylim(lo, hi + 0.3 * (hi - lo))  # room above for the printed peaks
                limits[ax] = ax.get_ylim()
    return limits


@dataclass(frozen=True, slots=True)
class OffAxis:
    """A series that lies wholly beyond one panel's axis: which, where, how far."""

    label: str
    above: bool
    low: float
    high: float
    """The series' reach inside the phase, in bytes."""


def mark_off_axis(
    ax: Any, extent: Extent, limits: tuple[float, float], unit: float, offset: int = 0
) -> list[OffAxis]:
    """Mark each other series that lies wholly beyond the axis with an arrow at that edge
    (right-hand side, in the series' colour); the legend says how far (``legend_label``).
    ``unit``: bytes per y unit; ``offset``: the bytes at the axis's zero."""
    lo, hi = limits
    found = []
    for label, (low, high, colour) in extent.others.items():
        if lo <= high and low <= hi:
            continue  # on the axis, at least in part: drawn, clipped where it leaves
        above = low > hi
        stacked = sum(1 for f in found if f.above == above)
        ax.text(
            0.985 - 0.07 * stacked,
            0.985 if above else 0.015,
            "▲" if above else "▼",
            transform=ax.transAxes,
            color=colour,
            fontsize=8,
            ha="right",
            va="top" if above else "bottom",
        )
        found.append(
            OffAxis(label=label, above=above, low=low * unit + offset, high=high * unit + offset)
        )
    return found


def legend_label(label: str, off: list[OffAxis], value: Callable[[float], str]) -> str:
    """``label`` for the legend, with where the series lies when some axis left it out."""
    mine = [o for o in off if o.label == label]
    if not mine:
        return f"{label} (sampled)"
    low, high = min(o.low for o in mine), max(o.high for o in mine)
    reach = value(low) if value(low) == value(high) else f"{value(low)}-{value(high)}"
    where = (
        "above"
        if all(o.above for o in mine)
        else "below"
        if not any(o.above for o in mine)
        else "beyond"
    )
    arrow = {"above": "▲", "below": "▼", "beyond": "▲▼"}[where]
    return f"{label} (sampled; {reach}, {where} the axis where {arrow})"
