"""Run one phase under every probe and return its typed record."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from offloadprobe.core.records import PhaseRecord
from offloadprobe.core.units import gbps
from offloadprobe.measure.probes.cgroup import CgroupProbe
from offloadprobe.measure.probes.gpu import GpuProbe
from offloadprobe.measure.probes.host import HostProbe
from offloadprobe.measure.probes.pinned import PinnedProbe

if TYPE_CHECKING:
    from offloadprobe.measure.sampler import Sampler


class Device(Protocol):
    """What the meter needs of the runtime: is the device emulated, and how to settle it."""

    emulated: bool

    def synchronize(self) -> None: ...

    def settle(self) -> None: ...


class PhaseMeter:
    """Resets every probe's peak before a phase and reads all of them after it."""

    def __init__(
        self,
        runtime: Device,
        *,
        host: HostProbe | None = None,
        device_in_host: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sampler: Sampler | None = None,
    ) -> None:
        self.runtime = runtime
        self.clock = clock
        self.host = host or HostProbe(device_in_host=device_in_host)
        self.pinned = PinnedProbe(enabled=not runtime.emulated)
        self.gpu = GpuProbe(enabled=not runtime.emulated)
        self.cgroup = CgroupProbe()
        self.sampler = sampler
        """Marks each phase's timed region on the timeline (``--trace``/``--plot`` only)."""

    def measure(
        self, cycle: int, phase: str, action: Callable[[], Any], *, bytes_moved: int = 0
    ) -> tuple[PhaseRecord, Any]:
        """Run ``action`` as one phase; return its record and the action's result."""
        self.runtime.synchronize()
        self.runtime.settle()
        for probe in (self.cgroup, self.gpu, self.pinned, self.host):
            probe.begin()
        mark = self.sampler.now() if self.sampler else 0
        start = self.clock()
        try:
            result = action()
            self.runtime.synchronize()
        finally:
            seconds = self.clock() - start
            if self.sampler:
                self.sampler.span(cycle, phase, mark, self.sampler.now())
        self.runtime.settle()
        host = self.host.end()
        record = PhaseRecord(
            cycle=cycle,
            phase=phase,
            seconds=seconds,
            bytes_moved=bytes_moved,
            gbps=gbps(bytes_moved, seconds),
            host=host,
            pinned=self.pinned.end(),
            gpu=self.gpu.end(),
            cgroup=self.cgroup.end(),
            loss=result if isinstance(result, float) else None,
        )
        return record, result
