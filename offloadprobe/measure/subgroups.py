"""Memory cgroups below a group of ours: one per rank, below the node's group.

A rank in a group of its own has everything it holds charged there, as a single worker
in its own group does (its RSS, its helper processes, the memfds and /dev/shm files it
wrote); the node's group above counts every rank's group, so its usage and peak stay the
node's. On cgroup v1 a group below another needs nothing more; on cgroup v2 the group
above must hand the memory controller to its children, which it cannot while it holds
processes itself: those move into its leaf ``REST`` first (root only).
"""

from __future__ import annotations

from offloadprobe.measure.cgroup import (
    CgroupUnavailable,
    MemoryGroup,
    _mkdir,
    enable_memory_below,
)


def child_group(parent: MemoryGroup, name: str) -> MemoryGroup:
    """Make an empty memory cgroup ``name`` below ``parent``; ``CgroupUnavailable`` says
    why not (the note says what had to be done on v2)."""
    base = parent.path
    if parent.version == 1:
        return MemoryGroup(1, _mkdir(base / name, base, "memory.limit_in_bytes"))
    subtree = base / "cgroup.subtree_control"
    note = None
    try:
        enabled = "memory" in subtree.read_text().split()
    except OSError as err:
        raise CgroupUnavailable(f"cannot read {subtree} ({err.strerror})") from None
    if not enabled:
        note = enable_memory_below(base)
    return MemoryGroup(2, _mkdir(base / name, base, "memory.max"), note)


def holds(group: MemoryGroup, pid: int) -> bool:
    """Whether process ``pid`` is in ``group`` or a group below it (the kernel's own list,
    read from outside the process)."""
    return pid in group.pids()
