"""Exact host high-water mark from the kernel: VmHWM, reset per phase via clear_refs.

Writing ``5`` to ``/proc/self/clear_refs`` resets VmHWM to the current RSS, so the
VmHWM read at the phase end is the phase's exact peak, including allocations
freed within microseconds. Where that write is refused (some sandboxes), a psutil
sampling thread stands in and the reading says ``sampled``: it can miss short peaks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from offloadprobe.core.records import HostReading

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def read_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssShmem (bytes) from /proc/self/status."""
    values: dict[str, int] = {}
    for line in STATUS.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssShmem", "RssFile"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel refuses."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class _Sampler(threading.Thread):
    """Polls RSS until stopped, keeping the maximum seen."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, self.process.memory_info().rss)


class DeviceArena(Protocol):
    """CPU emulation: the part of RSS that is the emulated device, held at a constant size.

    ``on_grow`` is called just before the constant grows and ``on_grown`` right after, so
    the probe can close one VmHWM interval and open the next."""

    constant: int
    on_grow: Callable[[], None] | None
    on_grown: Callable[[], None] | None


class HostProbe:
    """Host RSS and its exact (or sampled) peak around a phase."""

    name = "host"

    def __init__(
        self,
        *,
        force_sampling: bool = False,
        interval_s: float = 0.001,
        arena: DeviceArena | None = None,
    ) -> None:
        self.force_sampling = force_sampling
        self.interval_s = interval_s
        self.arena = arena
        """CPU emulation: the constant emulated-device part of RSS; None on CUDA."""
        self._before: dict[str, int] = {}
        self._device_before = 0
        self._closed_peak = 0
        """Highest host-only peak of the VmHWM intervals already closed in this phase."""
        self._sampler: _Sampler | None = None
        if arena is not None:
            arena.on_grow, arena.on_grown = self._close_interval, self._open_interval

    @property
    def exact(self) -> bool:
        """Whether the last ``begin`` could reset the kernel's high-water mark."""
        return self._sampler is None

    def _constant(self) -> int:
        return self.arena.constant if self.arena is not None else 0

    def _raw_peak(self) -> int:
        status = read_status()
        if self._sampler is not None:
            return max(self._sampler.peak, status["VmRSS"])
        return max(status["VmHWM"], status["VmRSS"])

    def _close_interval(self) -> None:
        if self._before:
            self._closed_peak = max(self._closed_peak, self._raw_peak() - self._constant())

    def _open_interval(self) -> None:
        if self._before and self._sampler is None:
            reset_hwm()

    def begin(self) -> None:
        self._device_before = self._constant()
        self._closed_peak = 0
        self._sampler = None
        if self.force_sampling or not reset_hwm():
            self._sampler = _Sampler(self.interval_s)
            self._sampler.start()
        self._before = read_status()

    def end(self) -> HostReading:
        status = read_status()
        device_after = self._constant()
        if self._sampler is not None:
            peak, method = self._sampler.stop(), "sampled"
        else:
            peak, method = status["VmHWM"], "vmhwm"
        peak = max(peak, status["VmRSS"])
        before, self._before = self._before, {}
        return HostReading(
            rss_before=before["VmRSS"],
            rss_after=status["VmRSS"],
            peak=peak,
            shmem_after=status.get("RssShmem", 0),
            method=method,
            device_in_host_before=self._device_before,
            device_in_host_after=device_after,
            host_peak_bytes=max(self._closed_peak, peak - device_after),
            anon_after=status.get("RssAnon", 0),
            file_after=status.get("RssFile", 0),
            anon_before=before.get("RssAnon", 0),
            file_before=before.get("RssFile", 0),
            shmem_before=before.get("RssShmem", 0),
        )
