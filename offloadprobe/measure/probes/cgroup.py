"""The process's memory cgroup: what an OOM killer actually compares with its limit.

cgroup v2: ``memory.current`` and ``memory.peak`` (since the group was created; since
Linux 6.12 a write resets it for reads through the same open file).
cgroup v1: ``memory.usage_in_bytes`` and ``memory.max_usage_in_bytes``, which the group's
owner can reset by writing 0, making the peak local to the phase.
"""

from __future__ import annotations

from offloadprobe.core.records import CgroupReading
from offloadprobe.measure.cgroup import CgroupFiles, MemoryGroup, PeakCounter, locate
from offloadprobe.measure.cgroup import read_int as _read
from offloadprobe.measure.reclaim import page_cache as _file


def _stat(files: CgroupFiles) -> dict[str, int]:
    """``memory.stat`` of the group the files belong to (v1: its hierarchy totals)."""
    return MemoryGroup(files.version, files.current.parent).stat()


class CgroupProbe:
    """Usage, peak and the page-cache/shared-memory split of the process's memory cgroup
    around a phase.

    ``reset=False`` leaves the peak counter alone: on a node whose ranks share one cgroup,
    only the node meter resets it (see ``engine/world/fence.py``)."""

    name = "cgroup"

    def __init__(self, files: CgroupFiles | str | None = "locate", *, reset: bool = True) -> None:
        self.files = locate() if files == "locate" else files
        self._counter = PeakCounter(self.files) if self.files is not None and reset else None
        self._peak_reset = False
        self._before: int | None = None
        self._file_before: int | None = None

    def begin(self) -> None:
        if self.files is not None:
            self._file_before = _file(_stat(self.files))
        self._peak_reset = self._counter.reset() if self._counter is not None else False
        self._before = _read(self.files.current) if self.files is not None else None

    def end(self) -> CgroupReading | None:
        if self.files is None:
            return None
        current = _read(self.files.current)
        if current is None:
            return None
        peak = self._counter.peak() if self._counter is not None else _read(self.files.peak)
        stat = _stat(self.files)
        return CgroupReading(
            version=self.files.version,
            current_after=current,
            peak=peak,
            peak_is_phase_local=self._peak_reset,
            current_before=self._before,
            file_before=self._file_before,
            file_after=_file(stat),
            shmem_after=stat.get("shmem"),
            anon_after=stat.get("anon", stat.get("rss")),
        )
