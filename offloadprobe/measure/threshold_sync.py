"""cgroup v1: bring the kernel's comparison of a group's usage with its thresholds up to
date, before a phase starts (``measure.parent_peaks`` reads the thresholds).

The kernel compares a group's usage with its registered thresholds once every
``THRESHOLD_EVENTS`` page charges and uncharges of a CPU, and signals each level the
usage is on the other side of than at the last comparison, up or down. Where the tool's
own work between two phases (a forked child's pages, a fingerprint's temporaries) rose
over a level and fell back after the last comparison, the first comparison inside the
next phase signals the fall, and the parent, which cannot tell up from down, reads a
peak that phase never had: ``lazy`` at 8 MiB read 1.20x for 1.06x in every phase after
the content search's child (``engine.model.search_apart``). A page charged and freed
that many times over, before the start mark (the parent drains the signals then), makes
the comparison current; the usage moves by one charge batch at most meanwhile, under
any level's spacing. About 1 ms.
"""

from __future__ import annotations

import mmap

THRESHOLD_EVENTS = 128
"""The kernel's ``THRESHOLDS_EVENTS_TARGET``."""


def check_thresholds_now() -> None:
    """Make the kernel compare this process's group's usage with its thresholds."""
    for _ in range(THRESHOLD_EVENTS):
        page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        page[0] = 1
        page.close()
