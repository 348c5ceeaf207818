"""Page cache in a memory cgroup: the part of its usage the kernel reclaims instead of
killing, how to drop it before a limit is set, and what the kernel reclaimed meanwhile.

A cgroup limit caps all that is charged to the group, page cache too, and at the limit
the kernel reclaims cache first and kills only when nothing is left to reclaim: cache
charged when a limit is set is headroom the limit never stated. So a limit meant for
what cannot be reclaimed drops the cache first (``drop_unmapped``) and counts what the
kernel reclaims while it holds (``count``).

- Page cache (``page_cache``): v2 ``file``, v1 ``cache``, less ``shmem`` (tmpfs,
  /dev/shm, memfds, SysV: no writeback frees them; they are held, and stay charged).
- Mapped cache (``mapped``): v2 ``file_mapped``, v1 ``mapped_file``: libraries the
  worker runs and files it maps. Dropping those would make the running code fault its
  own pages back in, charged to the limit (a tight limit then thrashes for minutes
  rather than kill: measured here, 88 s for one offload); they are left, and said.
- Dropping the rest: v2 ``memory.reclaim`` (Linux 5.19; before it, ``memory.high`` set
  under the usage for a moment), with ``memory.swap.max`` 0 first so that nothing is
  swapped; v1 ``memory.limit_in_bytes`` set for a moment to the usage less that cache
  (the kernel reclaims to fit, or answers EBUSY where it cannot: then less was dropped,
  and the figures say how much).
- Reclaim while a limit holds: v2 counts it (``memory.stat`` ``pgsteal``, pages) and how
  often the limit was reached (``memory.events`` ``max``); v1 counts no reclaim, so there
  the reclaimed bytes are the fall of the page cache, a lower bound (and its fail counts,
  ``memory.failcnt`` and ``memory.memsw.failcnt``, read 0 on this host's 6.18 kernel with
  the usage at the limit: they are kept, never relied on).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from offloadprobe.measure.cgroup import MemoryGroup, read_int

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def page_cache(stat: dict[str, int]) -> int | None:
    """Page cache in a ``memory.stat``: ``file`` (v2) or ``cache`` (v1), less ``shmem``:
    both count tmpfs and shared memory in it, and those are held (no writeback frees
    them). So are the pages ``cudaHostAlloc`` maps where the kernel accounts them as shared
    memory (gVisor on the lent H200: torch's pinned blocks read as ``shmem``)."""
    cache = stat.get("file", stat.get("cache"))
    if cache is None:
        return None
    return cache - stat.get("shmem", 0)


def mapped(stat: dict[str, int]) -> int:
    """Page cache some process maps (shared memory mapped included: never dropped)."""
    return stat.get("file_mapped", stat.get("mapped_file", 0))


def unmapped(stat: dict[str, int]) -> int:
    """Page cache no process maps: what ``drop_unmapped`` asks the kernel to reclaim."""
    return max(0, (page_cache(stat) or 0) - mapped(stat))


def drop_unmapped(group: MemoryGroup) -> int:
    """Reclaim the group's page cache no process maps; the bytes its page cache fell.

    Called with no limit set and the group's processes waiting (at a gate), so the kernel
    reclaims page cache only: there is no swap to write anything else to."""
    stat = group.stat()
    before, target = page_cache(stat) or 0, unmapped(stat)
    if target <= 0:
        return 0
    if group.version == 2:
        _reclaim_v2(group, target)
    else:
        _reclaim_v1(group, group.usage() - target)
    return max(0, before - (page_cache(group.stat()) or 0))


def _reclaim_v2(group: MemoryGroup, nbytes: int) -> None:
    swap = group.path / "memory.swap.max"
    if swap.exists():
        swap.write_text("0")
    reclaim = group.path / "memory.reclaim"
    if reclaim.exists():
        try:
            reclaim.write_text(str(nbytes))
        except OSError as err:
            if err.errno != errno.EAGAIN:  # EAGAIN: less could be reclaimed than asked
                raise
        return
    high = group.path / "memory.high"
    try:
        with contextlib.suppress(OSError):
            high.write_text(str(max(0, group.usage() - nbytes)))
    finally:
        high.write_text("max")


def _reclaim_v1(group: MemoryGroup, target_usage: int) -> None:
    limit = group.path / "memory.limit_in_bytes"
    try:
        limit.write_text(str(max(PAGE, target_usage)))
    except OSError as err:
        if err.errno != errno.EBUSY:  # EBUSY: the kernel could not reclaim that much
            raise
    finally:
        limit.write_text("-1")


@dataclass(frozen=True, slots=True)
class ReclaimCount:
    """The group's reclaim counters at one moment."""

    cache: int
    """Page cache charged to the group (``page_cache``)."""
    stolen: int | None
    """Bytes the kernel has reclaimed from the group since it was made (v2 ``pgsteal``);
    None where the kernel keeps no count (v1)."""
    hits: int | None
    """How often a charge found the group at its limit (v2 ``max`` events; v1 the memory
    and memory+swap fail counts)."""


def count(group: MemoryGroup) -> ReclaimCount:
    """The group's page cache and reclaim counters now."""
    stat = group.stat()
    stolen = stat["pgsteal"] * PAGE if group.version == 2 and "pgsteal" in stat else None
    if group.version == 2:
        hits = group.failcnt()
    else:
        counts = [read_int(group.path / f) for f in ("memory.failcnt", "memory.memsw.failcnt")]
        known = [c for c in counts if c is not None]
        hits = sum(known) if known else None
    return ReclaimCount(cache=page_cache(stat) or 0, stolen=stolen, hits=hits)


def reclaimed(start: ReclaimCount, end: ReclaimCount) -> tuple[int, bool]:
    """What the kernel reclaimed between two counts, and whether that is its own count
    (v2) or the fall of the page cache (v1: a lower bound; a file deleted meanwhile falls
    too, so the caller keeps it only where the group reached its limit)."""
    if start.stolen is not None and end.stolen is not None:
        return max(0, end.stolen - start.stolen), True
    return max(0, start.cache - end.cache), False
