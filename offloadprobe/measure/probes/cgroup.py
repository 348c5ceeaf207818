"""The process's memory cgroup: what an OOM killer actually compares with its limit.

cgroup v2: ``memory.current`` and ``memory.peak`` (since the group was created; since
Linux 6.12 a write resets it for reads through the same open file).
cgroup v1: ``memory.usage_in_bytes`` and ``memory.max_usage_in_bytes``, which the group's
owner can reset by writing 0, making the peak local to the phase.
"""

from __future__ import annotations

from offloadprobe.core.records import CgroupReading
from offloadprobe.measure.cgroup import CgroupFiles, PeakCounter, locate
from offloadprobe.measure.cgroup import read_int as _read


class CgroupProbe:
    """Usage and peak of the process's memory cgroup around a phase.

    ``reset=False`` leaves the peak counter alone: on a node whose ranks share one cgroup,
    only the node meter resets it (see ``engine/world/fence.py``)."""

    name = "cgroup"

    def __init__(self, files: CgroupFiles | str | None = "locate", *, reset: bool = True) -> None:
        self.files = locate() if files == "locate" else files
        self._counter = PeakCounter(self.files) if self.files is not None and reset else None
        self._peak_reset = False

    def begin(self) -> None:
        self._peak_reset = self._counter.reset() if self._counter is not None else False

    def end(self) -> CgroupReading | None:
        if self.files is None:
            return None
        current = _read(self.files.current)
        if current is None:
            return None
        return CgroupReading(
            version=self.files.version,
            current_after=current,
            peak=self._counter.peak() if self._counter is not None else _read(self.files.peak),
            peak_is_phase_local=self._peak_reset,
        )
