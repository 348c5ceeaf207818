"""Typed readings of one phase, one per probe: the host (process and cgroup), PyTorch's
pinned allocator with CUPTI's page-locked bytes beside it, the GPU, the cgroup.

Every size is an ``int`` of bytes; ``None`` means "not measurable here", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class HostReading:
    """Host memory around one phase: the measured process's own (``/proc/self/status``)
    and, where the worker has a memory cgroup of its own, the group's (everything the
    process and all it started hold: helper processes, shared memory, tmpfs files).

    ``rss_*`` and ``peak`` are the kernel's raw figures for the process. In CPU emulation
    they include the emulated device, a part of RSS held at a constant size (device
    storages + ballast, see ``engine/runtime/device_memory.py``): ``device_in_host_*`` is
    that constant, and ``host_peak_bytes`` the phase's high-water mark less it, interval
    by interval. On CUDA the constant is 0.

    ``group_*`` are the group's held bytes (usage less page cache less the emulated
    device). Where they exist they govern: ``host_rss_before``/``after`` are the group's,
    and ``host_peak`` the larger of the group's peak and the process's own rise. So memory
    held outside the process counts, and a process that resets its own high-water mark
    (``/proc/self/clear_refs``) does not hide a peak the group saw.
    """

    rss_before: int
    rss_after: int
    peak: int
    """High-water mark of RSS during the phase (raw, emulated device included)."""
    shmem_after: int
    """RssShmem after the phase: where cudaHostAlloc'd pinned pages show up."""
    method: str
    """``vmhwm`` (exact, reset via clear_refs) or ``sampled`` (psutil polling, may miss)."""
    device_in_host_before: int = 0
    """CPU emulation only: the constant emulated-device part of RSS at the phase start."""
    device_in_host_after: int = 0
    """CPU emulation only: the constant emulated-device part of RSS at the phase end."""
    host_peak_bytes: int | None = None
    """Peak of host-only RSS (``peak`` less the constant of each VmHWM interval)."""
    anon_after: int = 0
    """RssAnon after the phase."""
    file_after: int = 0
    """RssFile after the phase (mapped files: libraries, page cache of mapped files)."""
    anon_before: int = 0
    file_before: int = 0
    shmem_before: int = 0
    group_before: int | None = None
    """The worker's cgroup at the phase start: usage less page cache less emulated device."""
    group_after: int | None = None
    group_peak: int | None = None
    """The group's high-water mark in the phase, held bytes (None: not phase-local here)."""
    group_source: str | None = None
    """Where ``group_*`` come from: ``cgroup`` (the worker's or rank's own), or ``process
    tree`` (no cgroup could be made: the RSS of the worker and its descendants plus
    /dev/shm), or ``process tree, no /dev/shm`` (a rank without a group of its own)."""

    @property
    def process_rss_before(self) -> int:
        """The process's own RSS at the phase start, less the emulated device."""
        return self.rss_before - self.device_in_host_before

    @property
    def process_rss_after(self) -> int:
        return self.rss_after - self.device_in_host_after

    @property
    def process_peak(self) -> int:
        """The process's own high-water mark in the phase, less the emulated device."""
        if self.host_peak_bytes is not None:
            return self.host_peak_bytes
        return self.peak - self.device_in_host_after

    @property
    def host_rss_before(self) -> int:
        """Host bytes held at the phase start (the group's where it has one)."""
        return self.group_before if self.group_before is not None else self.process_rss_before

    @property
    def host_rss_after(self) -> int:
        """Host bytes held at the phase end (the group's where it has one)."""
        return self.group_after if self.group_after is not None else self.process_rss_after

    @property
    def host_peak(self) -> int:
        """The phase's host high-water mark: the larger of the group's peak and the
        process's own rise over the phase start, on the group's scale."""
        own = self.process_peak
        if self.group_before is None:
            return own
        rise = own - self.process_rss_before
        candidates = [self.group_before + rise, self.host_rss_after]
        if self.group_peak is not None:
            candidates.append(self.group_peak)
        return max(candidates)


@dataclass(frozen=True, kw_only=True, slots=True)
class PinnedReading:
    """PyTorch's pinned host caching allocator (``torch.cuda.host_memory_stats``)."""

    reserved_after: int
    """Bytes of pinned blocks the allocator owns, in use or cached (rounded sizes)."""
    in_use_after: int | None
    """Bytes of pinned blocks handed out to tensors; None on a torch whose counters do not
    count frees (``core.pinned_stats``: up to 2.11 they only climb)."""
    reserved_peak: int
    key_schema: str
    """Which key names this torch version uses: ``reserved_bytes`` or ``active_bytes``."""
    locked_after: int | None = None
    """Page-locked host bytes any allocator holds (CUDA's own records, through CUPTI:
    PyTorch's, CuPy's, a ``cudaHostRegister``); None where CUPTI is not recording."""
    locked_peak: int | None = None
    """The most page-locked host bytes held at any moment of the phase (CUPTI)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuReading:
    """PyTorch's CUDA caching allocator and the driver's view of device memory."""

    allocated_before: int
    allocated_after: int
    allocated_peak: int
    reserved_after: int
    reserved_peak: int
    device_used_after: int
    """``total - free`` from ``torch.cuda.mem_get_info``: includes other processes and NCCL."""
    outside_after: int | None = None
    """Device bytes this process allocated outside PyTorch's caching allocator (CUPTI's
    records less PyTorch's reserved bytes); None where CUPTI is not recording."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CgroupReading:
    """The process's memory cgroup (v2 ``memory.current``/``memory.peak`` or v1 usage)."""

    version: int
    current_after: int
    peak: int | None
    peak_is_phase_local: bool
    """True when the peak counter was reset at the phase start (v1 as root)."""
    current_before: int | None = None
    file_before: int | None = None
    """Page cache charged to the group (``memory.stat`` file) at the phase start."""
    file_after: int | None = None
    shmem_after: int | None = None
    """Shared memory charged to the group: tmpfs and /dev/shm files, memfd, SysV."""
    anon_after: int | None = None
    peak_read_by: str | None = None
    """``parent``: the peak was reset and read by the worker's parent at the phase's
    marks, out of the measured code's reach (``measure.parent_peaks``); None: by the
    measured process itself."""
    peak_floor: int | None = None
    """cgroup v1, read by the parent: the highest usage threshold the kernel signalled
    in the phase, a floor under the peak that no write to the group's files lowers."""
