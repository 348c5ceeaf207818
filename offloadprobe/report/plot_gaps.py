"""Where a plot's lines are readings and where they are not.

A line is a reading where its sampler took a sample; across a gap (``measure.timeline``)
it only holds the last value. So each row's line is faded across its own gaps, and the
panel is marked only where no row drawn there has a reading: one row's gap does not mark
another row's samples as missing. Hatched: no sample was taken (every CPU busy);
stippled: samples were taken and left out (CPU emulation moving its device pages).

The phase records' exact readings at a phase's start and end (RSS, the allocators'
bytes) pin the main line there, so a value held from before a gap cannot stand for the
phase's start.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

Interval = tuple[float, float]

SAMPLERS = {"host": "process", "pinned": "thread", "gpu": "thread"}
"""Which sampler draws each panel's lines: the sidecar process, or the CUDA thread."""


def holes(
    timeline: Any, panel: str, lo_ns: int, hi_ns: int, causes: tuple[str, ...] = ()
) -> list[tuple[int, int]]:
    """The panel's gaps that overlap ``[lo, hi]``, clipped to it (nanoseconds); of the
    given ``causes`` only, where any are given."""
    sampler = SAMPLERS[panel]
    return sorted(
        (max(g.start_ns, lo_ns), min(g.end_ns, hi_ns))
        for g in timeline.gaps
        if g.sampler == sampler
        and g.end_ns > lo_ns
        and g.start_ns < hi_ns
        and (not causes or g.cause in causes)
    )


def masked(times_ns: Sequence[int], values: Sequence[float], gaps: list[tuple[int, int]]):
    """``values`` with NaN where the step from a point to the next lies in a gap, so the
    line is drawn only where it was read (a step function: each value holds until the
    next point)."""
    out = list(values)
    for i in range(len(times_ns) - 1):
        if any(lo <= times_ns[i] and times_ns[i + 1] <= hi for lo, hi in gaps):
            out[i] = math.nan
    return out


def exact_ends(rec: Any, panel: str) -> tuple[int | None, int | None]:
    """The phase record's own readings at the phase's start and end, on the scale the
    panel's main line is sampled on (the process's RSS, the allocators' bytes)."""
    if rec is None:
        return None, None
    if panel == "host":
        return rec.host.rss_before, rec.host.rss_after
    if panel == "pinned":
        return None, rec.pinned.reserved_after if rec.pinned else None
    return (rec.gpu.allocated_before, rec.gpu.allocated_after) if rec.gpu else (None, None)


def pinned_to(
    times_ns: list[int], values: list[int], start_ns: int, end_ns: int, ends: tuple
) -> tuple[list[int], list[int]]:
    """The samples with the exact readings at ``start_ns`` and ``end_ns`` in place (each
    after any sample of the same instant, so it governs from there)."""
    points = list(zip(times_ns, values, strict=True))
    for t, value in ((start_ns, ends[0]), (end_ns, ends[1])):
        if value is not None:
            k = sum(1 for s, _ in points if s <= t)
            points.insert(k, (t, value))
    return [t for t, _ in points], [v for _, v in points]


def unread_by_all(rows: list[tuple[Interval, list[Interval]]]) -> list[Interval]:
    """Where every row that draws there has no reading: ``rows`` is each row's drawn
    window and its gaps, on one axis (milliseconds from the phase start)."""
    edges = sorted({x for window, gaps in rows for a, b in (window, *gaps) for x in (a, b)})
    out: list[Interval] = []
    for a, b in itertools.pairwise(edges):
        mid = (a + b) / 2
        drawing = [gaps for (lo, hi), gaps in rows if lo <= mid <= hi]
        if drawing and all(any(g0 <= mid <= g1 for g0, g1 in gaps) for gaps in drawing):
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


def marks(rows: list[tuple[Interval, list[Interval], list[Interval]]]):
    """``rows``: each row's drawn window, all its gaps and its busy ones (ms from the phase
    start). Returns where no row has a reading because none was taken (hatched) and where
    none has one because what was read was left out (stippled)."""
    hatched = unread_by_all([(window, busy) for window, _, busy in rows])
    unread = unread_by_all([(window, gaps) for window, gaps, _ in rows])
    return hatched, minus(unread, hatched)


def minus(these: list[Interval], those: list[Interval]) -> list[Interval]:
    """The parts of ``these`` outside every interval of ``those``."""
    out = []
    for a, b in these:
        cuts = sorted((max(a, c), min(b, d)) for c, d in those if c < b and d > a)
        start = a
        for c, d in cuts:
            if c > start:
                out.append((start, c))
            start = max(start, d)
        if start < b:
            out.append((start, b))
    return out
