"""A memory cgroup's usage and peak files, read as integers, and the peak counter a phase
resets at its start (``measure.cgroup`` finds and makes the groups)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CgroupFiles:
    version: int
    current: Path
    peak: Path | None


def read_int(path: Path | None) -> int | None:
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
        return read_int(self.files.peak)

    def usage(self) -> int | None:
        return read_int(self.files.current)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
