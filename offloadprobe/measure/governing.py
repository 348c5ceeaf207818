"""The host figures that govern a phase: the worker's own memory cgroup beside its RSS.

A worker that runs alone in a memory cgroup of its own has everything it holds charged
there: its RSS, its helper processes, files it keeps in tmpfs or /dev/shm, memfds, SysV
segments. ``govern`` puts the group's held bytes (usage less page cache, less the
emulated device in CPU emulation) beside the process's own reading; the record's
``host_*`` properties then take the larger of the two views. Page cache does not count
as held (offload to disk is legitimate); it is the one part of the group left out.

Where no cgroup could be made, ``tree`` stands in: the RSS of the worker and its
descendants plus what /dev/shm holds, read at the phase's start and end (no peak of the
other processes: the record says ``process tree``).
"""

from __future__ import annotations

import os
from dataclasses import replace

from offloadprobe.core.records import CgroupReading, HostReading, PhaseRecord
from offloadprobe.core.streamed import PhasePeak


def govern(host: HostReading, group: CgroupReading | None) -> HostReading:
    """``host`` with the worker's own group's held bytes, where they were read."""
    if group is None or group.current_before is None:
        return host
    file_before = group.file_before or 0
    file_after = group.file_after if group.file_after is not None else file_before
    before = group.current_before - file_before - host.device_in_host_before
    after = group.current_after - file_after - host.device_in_host_after
    peak = None
    if group.peak is not None and group.peak_is_phase_local:
        peak = group.peak - file_after - host.device_in_host_after
    return replace(
        host, group_before=before, group_after=after, group_peak=peak, group_source="cgroup"
    )


def shm_used() -> int:
    """Bytes /dev/shm holds now (every process's: the fallback's estimate)."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tree_rss(pid: int | None = None) -> int:
    """RSS of a process and all its descendants (shared pages count once per process)."""
    import psutil

    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in family:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


RANK_TREE = "process tree, no /dev/shm"
"""A rank without a group of its own: its process tree's RSS (the node's /dev/shm holds
every rank's files, so it is left to the node's figure)."""


def tree(
    host: HostReading,
    before: tuple[int, int],
    after: tuple[int, int],
    *,
    source: str = "process tree",
) -> HostReading:
    """``host`` with the process tree's RSS plus /dev/shm, ``(rss, shm)`` around the phase."""
    held_before = before[0] + before[1] - host.device_in_host_before
    held_after = after[0] + after[1] - host.device_in_host_after
    return replace(
        host,
        group_before=held_before,
        group_after=held_after,
        group_peak=None,
        group_source=source,
    )


def parent_peak(phase: PhaseRecord, mark: PhasePeak) -> PhaseRecord:
    """``phase`` with the group peak its parent read between the worker's marks: the
    cgroup reading's peak becomes the parent's where that is larger (or the record had
    none phase-local), and the host figures' group peak with it (held bytes: less the page
    cache the parent read at the end, less the emulated device)."""
    group, host = phase.cgroup, phase.host
    if mark.peak_bytes is None or group is None or host.group_before is None:
        return phase
    own = group.peak if group.peak_is_phase_local else None
    if own is not None and own >= mark.peak_bytes:
        return phase
    cache = mark.file_after_bytes if mark.file_after_bytes is not None else group.file_after
    held = mark.peak_bytes - (cache or 0) - host.device_in_host_after
    group = replace(
        group,
        peak=mark.peak_bytes,
        peak_is_phase_local=True,
        peak_read_by="parent",
        peak_floor=mark.floor_bytes,
    )
    host = replace(host, group_peak=max(held, host.group_peak or held))
    return replace(phase, cgroup=group, host=host)
