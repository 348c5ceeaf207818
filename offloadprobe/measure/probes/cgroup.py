"""The process's memory cgroup: what an OOM killer actually compares with its limit.

cgroup v2: ``memory.current`` and ``memory.peak`` (since the group was created).
cgroup v1: ``memory.usage_in_bytes`` and ``memory.max_usage_in_bytes``, which root
can reset by writing 0, making the peak local to the phase.
"""

from __future__ import annotations

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


class CgroupProbe:
    """Usage and peak of the process's memory cgroup around a phase."""

    name = "cgroup"

    def __init__(self, files: CgroupFiles | str | None = "locate") -> None:
        self.files = locate() if files == "locate" else files
        self._peak_reset = False

    def begin(self) -> None:
        self._peak_reset = False
        if self.files is not None and self.files.version == 1 and self.files.peak is not None:
            try:
                self.files.peak.write_text("0")
                self._peak_reset = True
            except OSError:
                pass

    def end(self) -> CgroupReading | None:
        if self.files is None:
            return None
        current = _read(self.files.current)
        if current is None:
            return None
        return CgroupReading(
            version=self.files.version,
            current_after=current,
            peak=_read(self.files.peak),
            peak_is_phase_local=self._peak_reset,
        )
