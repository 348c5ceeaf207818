"""The process's memory cgroup: what an OOM killer actually compares with its limit.

cgroup v2: ``memory.current`` and ``memory.peak`` (since the group was created; since
Linux 6.12 a write resets it for reads through the same open file).
cgroup v1: ``memory.usage_in_bytes`` and ``memory.max_usage_in_bytes``, which the group's
owner can reset by writing 0, making the peak local to the phase.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from offloadprobe.core.records import CgroupReading

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class CgroupFiles:
    version: int
    current: Path
    peak: Path | None


def locate(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> CgroupFiles | None:
    """Find this process's memory cgroup files, or None where none is readable."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if "memory" in controllers.split(","):
            base = root / "memory" / rel
            files = CgroupFiles(
                1, base / "memory.usage_in_bytes", base / "memory.max_usage_in_bytes"
            )
            if files.current.exists():
                return files
    for line in lines:
        hierarchy, _, path = line.split(":", 2)
        if hierarchy == "0":
            for base in (root / path.lstrip("/"), root / "unified" / path.lstrip("/")):
                if (base / "memory.current").exists():
                    peak = base / "memory.peak"
                    return CgroupFiles(2, base / "memory.current", peak if peak.exists() else None)
    return None


def _read(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class PeakCounter:
    """A cgroup's usage high-water mark that can be reset at a phase start where the kernel
    allows it: v1 by writing 0; v2 (Linux >= 6.12) by writing through a kept-open file,
    after which reads through that same file give the peak since the write."""

    def __init__(self, files: CgroupFiles) -> None:
        self.files = files
        self._fd: int | None = None
        if files.version == 2 and files.peak is not None:
            try:
                self._fd = os.open(files.peak, os.O_RDWR)
            except OSError:
                self._fd = None

    def reset(self) -> bool:
        """Reset the peak to the current usage; False where this kernel or group refuses."""
        try:
            if self._fd is not None:
                os.write(self._fd, b"reset\n")
                return True
            if self.files.version == 1 and self.files.peak is not None:
                self.files.peak.write_text("0")
                return True
        except OSError:
            return False
        return False

    def peak(self) -> int | None:
        if self._fd is not None:
            try:
                return int(os.pread(self._fd, 64, 0).split()[0])
            except (OSError, ValueError, IndexError):
                return None
        return _read(self.files.peak)

    def usage(self) -> int | None:
        return _read(self.files.current)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
