"""The zero of the host figures, and the rule that holds them to it.

Every host figure of a run is over one zero: the host before any strategy code ran (the
strategies' modules imported and built in the construction phase, ``engine.zero``),
plus what the framework's own train phases grow the host by until the first offload, as
a run without strategies measured it. The record keeps the facts: the construction
phase, ``pre_offload_growth_bytes`` (the train phases before the first offload, strategy
code in them or not) and ``framework_growth_bytes`` (the same phases without strategies).
What this module decides:

- :func:`counted_growth`: the pre-offload growth counted in every host figure, the part
  beyond the framework's, when that is beyond the noise (then counted whole). The noise is
  ``GROWTH_NOISE`` plus half the framework's own growth: the first train phase of a fresh
  model, measured once without strategies and once in an honest run of the same process,
  differed by up to 1.9 MiB on 4.0 MiB (47% of it) at 130 MB of parameters and by up to
  0.75 MiB below 1 MiB of growth at 4 to 16 MiB (CPU emulation, 7 pairs). A strategy that
  takes less than that through a hook before its first offload is not seen. Within it the
  zero stays where the first offload starts (less what the construction held), as before:
  honest runs keep their figures exactly.
- :func:`negative_figures`: a host figure below the zero by more than the noise is an
  inconsistency (the verdict ``inconsistent``, exit 1), never a pass: something freed
  memory that was there before the strategies ran, or the zero is wrong. The margin is
  ``max(NEGATIVE_FLOOR, moved // NEGATIVE_FRACTION)``: honest rows (every built-in
  strategy with and without optimizer offload at 4 and 16 MiB, and a strategy that keeps
  nothing on the host) read at most 0.08 MiB below their true footprint, never below 0
  (the one that keeps nothing: +0.38 MiB at least); 256 KiB is three times that, and 1%
  of what moves lets the allocator's slack grow with the payload. A steady -0.02x is an
  inconsistency from 12.8 MiB moved on. Where the process's own figures govern (no
  cgroup of its own: a rank of several), RSS counts mapped file pages, which the kernel
  may drop under pressure: what RssFile fell by over the moves is allowed besides (a
  strategy that frees anonymous memory held before it ran is caught all the same).
"""

from __future__ import annotations

from offloadprobe.core.records import RunRecord
from offloadprobe.core.units import format_bytes

GROWTH_NOISE = 2**20
"""Pre-offload host growth beyond the framework's that is still noise, besides
``GROWTH_SHARE`` of the framework's own (see above)."""
GROWTH_SHARE = 2
NEGATIVE_FLOOR = 256 * 2**10
NEGATIVE_FRACTION = 100


def counted_growth(growth: int, framework: int | None) -> int:
    """The part of the train phases' host growth before the first offload that counts in
    every host figure: beyond the framework's own (0 where none was measured: no train
    step ran), when that is beyond the noise; else 0."""
    own = max(0, framework or 0)
    beyond = growth - own
    return beyond if beyond > GROWTH_NOISE + own // GROWTH_SHARE else 0


def negative_margin(moved: int) -> int:
    """How far below the zero a host figure may read and still be noise."""
    return max(NEGATIVE_FLOOR, moved // NEGATIVE_FRACTION)


MOVES = ("offload", "load", "offload optimizer", "load optimizer")


def file_pages_dropped(run: RunRecord) -> int:
    """How far RssFile fell from the first move's start to its lowest at a move's end,
    where the process's own figures govern (0 where a group's do: they count no page
    cache)."""
    moving = [p for p in run.phases if p.phase in MOVES]
    if not moving or moving[0].host.group_before is not None:
        return 0
    return max(0, moving[0].host.file_before - min(p.host.file_after for p in moving))


def negative_figures(run: RunRecord) -> tuple[str, ...]:
    """Each host figure below the zero by more than the noise, in words."""
    summary = run.summary
    if summary is None:
        return ()
    moved = summary.moved_bytes or run.payload_bytes
    margin = negative_margin(moved) + file_pages_dropped(run)
    figures = {
        "host peak": summary.host_peak_bytes,
        "steady host": summary.steady_host_bytes,
        "host held while training": summary.held_while_training_bytes,
    }
    lines = []
    for name, value in figures.items():
        if value is not None and value < -margin:
            ratio = f" ({value / moved:+.2f}x)" if moved else ""
            lines.append(
                f"{name} {format_bytes(value)}{ratio} is below the host before the "
                f"strategies ran by more than the noise ({format_bytes(margin)}): memory "
                "held before them was freed, the figures cannot be trusted"
            )
    return tuple(lines)


__all__ = [
    "GROWTH_NOISE",
    "counted_growth",
    "file_pages_dropped",
    "negative_figures",
    "negative_margin",
]
