"""A worker's memory-cgroup peak, phase by phase, read and reset by its parent.

The measured code runs in the worker, and a worker as root can write its group's files:
on cgroup v1 a ``0`` written to ``memory.max_usage_in_bytes`` resets the one high-water
mark the group has, so a peak read there after the measured code ran can have been
lowered by it. The parent (``isolation.warden``) holds what the worker cannot touch:

* cgroup v1: beside the high-water mark it resets at each phase start and reads at the
  end, usage thresholds registered through ``cgroup.event_control`` (one eventfd per
  level, the parent's own: no write to the group's files removes them). The kernel
  signals each level the usage crosses, as it charges, so the highest level crossed
  upwards in a phase is a floor under its peak that a reset cannot lower. Each
  registration waits for an RCU grace period (some 8 ms here), so the levels are laid
  once, at the first phase, over the usage then, in multiples of the run's payload
  (``FRACTIONS``: a quarter payload apart up to 4x), and more only where the usage at a
  phase start has left too few of them above it. The kernel checks them every 128 page
  charges of a CPU: a peak is seen to within the spacing of the levels and 512 KiB.
* cgroup v2: ``memory.peak`` through a file the parent keeps open (Linux >= 6.12: a
  write resets the peak for reads through that file only; the worker's own writes reset
  its files, never this one). On older kernels the peak cannot be reset by anyone, and is
  not phase-local: no figure comes from it.

Every size is an ``int`` of bytes; ``None`` means "not read".
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from offloadprobe.measure.cgroup import MemoryGroup, PeakCounter
from offloadprobe.measure.reclaim import page_cache

FRACTIONS = (*(k / 4 for k in range(1, 17)), 6.0, 8.0, 16.0)
"""The thresholds over the usage where they are laid, in multiples of the payload: a
quarter payload apart up to 4x (a phase that starts between two levels, above where they
were laid, still sees a 2x transient to within a quarter payload), coarser beyond."""
NEAR = 4
"""More levels are laid where fewer than this many lie within ``NEAR`` payloads above the
usage at a phase start (those laid before stay: the usage may come back to them)."""
MOST = 8 * len(FRACTIONS)
"""Levels kept at most: beyond, they are dropped and laid again over the usage now."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupPeak:
    """One phase's group peak as the parent read it."""

    peak_bytes: int | None
    """The larger of the high-water mark and the thresholds' floor; None: not
    phase-local here (a v2 kernel before 6.12, or the reset was refused)."""
    watermark_bytes: int | None
    """The group's high-water mark read at the phase end (v1: resettable by the worker)."""
    floor_bytes: int | None
    """cgroup v1: the highest threshold the kernel signalled (usage reached at least
    this); None where none was registered or none was crossed."""
    file_after_bytes: int | None
    """Page cache charged to the group at the phase end (not held: left out of figures)."""


class Thresholds:
    """cgroup v1: usage thresholds (bytes), each an eventfd of this process."""

    def __init__(self, group: MemoryGroup) -> None:
        self.group = group
        self.levels: list[tuple[int, int]] = []
        self._usage: int | None = None
        self.broken = False
        """Registration failed (no event control here, or a fake group): no floor."""

    def add(self, levels: list[int]) -> None:
        """Register ``levels`` beside those there (each waits for an RCU grace period)."""
        if self.broken:
            return
        try:
            if self._usage is None:
                self._usage = os.open(self.group.path / "memory.usage_in_bytes", os.O_RDONLY)
            control = os.open(self.group.path / "cgroup.event_control", os.O_WRONLY)
        except OSError:
            self.broken = True
            return
        try:
            for level in levels:
                efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                self.levels.append((level, efd))
                os.write(control, f"{efd} {self._usage} {level}".encode())
        except OSError:
            self.broken = True
            self.close()
        finally:
            os.close(control)

    def near(self, usage: int, span: int) -> int:
        """How many levels lie in ``(usage, usage + span]``."""
        return sum(1 for level, _ in self.levels if usage < level <= usage + span)

    def crossed(self, above: int = 0) -> int | None:
        """The highest level over ``above`` the kernel signalled since the last call (each
        call drains the counts), if any."""
        reached = None
        for level, efd in self.levels:
            try:
                if os.eventfd_read(efd) and level > above:
                    reached = max(level, reached or 0)
            except (BlockingIOError, OSError):
                continue
        return reached

    def close(self) -> None:
        """Close every eventfd: the kernel drops the registrations with them."""
        for _, efd in self.levels:
            with contextlib.suppress(OSError):
                os.close(efd)
        self.levels = []
        if self._usage is not None:
            with contextlib.suppress(OSError):
                os.close(self._usage)
            self._usage = None


class ParentPeaks:
    """``begin`` at a phase start, ``end`` at its end: the group's peak over the phase.
    ``scale``: the run's payload in bytes, the unit of the v1 thresholds."""

    def __init__(self, group: MemoryGroup, scale: int = 0) -> None:
        self.group = group
        self.scale = max(scale, 2**20)
        self._counter = PeakCounter(group.files)
        self._thresholds: Thresholds | None = None
        self._local = False
        self._start = 0

    def begin(self) -> None:
        self._local = self._counter.reset()
        usage = self._counter.usage()
        self._start = usage or 0
        if self.group.version != 1 or usage is None:
            return
        ladder = self._thresholds
        if ladder is None:
            ladder = self._thresholds = Thresholds(self.group)
        if ladder.near(usage, NEAR * self.scale) < NEAR:
            if len(ladder.levels) >= MOST:
                ladder.close()
            ladder.add([usage + int(f * self.scale) for f in FRACTIONS])
        ladder.crossed()  # drained: what counts is crossed from now on

    def end(self) -> GroupPeak:
        mark = self._counter.peak() if self._local else None
        ladder = self._thresholds
        floor = ladder.crossed(above=self._start) if ladder is not None else None
        figures = [f for f in (mark, floor) if f is not None]
        return GroupPeak(
            peak_bytes=max(figures) if figures else None,
            watermark_bytes=mark,
            floor_bytes=floor,
            file_after_bytes=page_cache(self.group.stat()),
        )

    def close(self) -> None:
        if self._thresholds is not None:
            self._thresholds.close()
            self._thresholds = None
        self._counter.close()
