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


class HostProbe:
    """Host RSS and its exact (or sampled) peak around a phase."""

    name = "host"

    def __init__(
        self,
        *,
        force_sampling: bool = False,
        interval_s: float = 0.001,
        device_in_host: Callable[[], int] | None = None,
    ) -> None:
        self.force_sampling = force_sampling
        self.interval_s = interval_s
        self.device_in_host = device_in_host
        """CPU emulation: how many bytes of RSS are emulated device storage right now."""
        self._rss_before = 0
        self._device_before = 0
        self._sampler: _Sampler | None = None

    @property
    def exact(self) -> bool:
        """Whether the last ``begin`` could reset the kernel's high-water mark."""
        return self._sampler is None

    def begin(self) -> None:
        self._device_before = self.device_in_host() if self.device_in_host else 0
        self._sampler = None
        if self.force_sampling or not reset_hwm():
            self._sampler = _Sampler(self.interval_s)
            self._sampler.start()
        self._rss_before = read_status()["VmRSS"]

    def end(self) -> HostReading:
        status = read_status()
        device_after = self.device_in_host() if self.device_in_host else 0
        if self._sampler is not None:
            peak, method = self._sampler.stop(), "sampled"
        else:
            peak, method = status["VmHWM"], "vmhwm"
        return HostReading(
            rss_before=self._rss_before,
            rss_after=status["VmRSS"],
            peak=max(peak, status["VmRSS"]),
            shmem_after=status.get("RssShmem", 0),
            method=method,
            device_in_host_before=self._device_before,
            device_in_host_after=device_after,
        )
