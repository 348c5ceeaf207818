"""Run one phase under every probe and return its typed record."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from offloadprobe.core.records import GpuReading, PhaseRecord
from offloadprobe.core.units import gbps
from offloadprobe.measure.governing import RANK_TREE, govern, shm_used, tree, tree_rss
from offloadprobe.measure.probes.cgroup import CgroupProbe
from offloadprobe.measure.probes.gpu import GpuProbe
from offloadprobe.measure.probes.host import DeviceArena, HostProbe
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
        arena: DeviceArena | None = None,
        device_counters: Callable[[], tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sampler: Sampler | None = None,
        cgroup_reset: bool = True,
        group: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.clock = clock
        self.device_counters = device_counters
        """CPU emulation: cumulative (freed, allocated) device bytes of the emulated device."""
        self.host = host or HostProbe(arena=arena)
        self.pinned = PinnedProbe(enabled=not runtime.emulated)
        self.gpu = GpuProbe(enabled=not runtime.emulated)
        self.cgroup = CgroupProbe(reset=cgroup_reset)
        self.sampler = sampler
        """Marks each phase's timed region on the timeline (``--trace``/``--plot`` only)."""
        self.group = group
        """``cgroup``: the process's cgroup is the worker's (or rank's) own, its figures
        govern; ``tree``: none could be made, the process tree's RSS and /dev/shm stand
        in; ``rank tree``: a rank with no group of its own, its process tree's RSS (the
        node's /dev/shm is every rank's: the node's figure counts it); None: the
        process's own figures alone (a test)."""
        self._tree_before = (0, 0)

    def measure(
        self,
        cycle: int,
        phase: str,
        action: Callable[[], Any],
        *,
        bytes_moved: int = 0,
        mark: bool = True,
    ) -> tuple[PhaseRecord, Any]:
        """Run ``action`` as one phase; return its record and the action's result.
        ``mark``: mark it on the timeline (not for a measurement that is no phase of the
        run, such as the no-strategy run's train phases)."""
        sampler = self.sampler if mark else None
        self.runtime.synchronize()
        self.runtime.settle()
        for probe in (self.cgroup, self.gpu, self.pinned, self.host):
            probe.begin()
        if self.group in ("tree", "rank tree"):
            self._tree_before = (tree_rss(), shm_used() if self.group == "tree" else 0)
        counted = self.device_counters() if self.device_counters else (0, 0)
        began = sampler.now() if sampler else 0
        start = self.clock()
        try:
            result = action()
            self.runtime.synchronize()
        finally:
            seconds = self.clock() - start
            if sampler:
                sampler.span(cycle, phase, began, sampler.now())
        self.runtime.settle()
        host = self.host.end()
        group = self.cgroup.end()
        if self.group == "cgroup":
            host = govern(host, group)
        elif self.group == "tree":
            host = tree(host, self._tree_before, (tree_rss(), shm_used()))
        elif self.group == "rank tree":
            host = tree(host, self._tree_before, (tree_rss(), 0), source=RANK_TREE)
        gpu = self.gpu.end()
        freed, allocated = _device_traffic(gpu, counted, self.device_counters)
        record = PhaseRecord(
            cycle=cycle,
            phase=phase,
            seconds=seconds,
            bytes_moved=bytes_moved,
            gbps=gbps(bytes_moved, seconds),
            host=host,
            pinned=self.pinned.end(),
            gpu=gpu,
            cgroup=group,
            loss=result if isinstance(result, float) else None,
            device_freed_bytes=freed,
            device_allocated_bytes=allocated,
        )
        return record, result


def _device_traffic(
    gpu: GpuReading | None,
    counted: tuple[int, int],
    counters: Callable[[], tuple[int, int]] | None,
) -> tuple[int | None, int | None]:
    """(device bytes freed, device bytes allocated) in the phase, measured as a net change,
    from the emulated device's own counters or the CUDA allocator's: a copy made on the
    device and the original freed is no move."""
    if counters is not None:
        freed, allocated = counters()
        change = (allocated - counted[1]) - (freed - counted[0])
    elif gpu is None:
        return None, None
    else:
        change = gpu.allocated_after - gpu.allocated_before
    return max(0, -change), max(0, change)
