"""What a moving phase really moved: device bytes freed or restored, as measured.

Bytes moved are the device memory a phase gave back (offloads) or took (loads), net, less
``grad_data`` (discarded on offload, zeroed on load: nothing is copied). A strategy that
hands memory back to the driver outside PyTorch's allocator is measured by the driver's
own figure (``mem_get_info``), corrected by PyTorch's reserved bytes only where that
lowers the figure, and its storages count as released only when the driver confirms it.

A reserved byte need not be a device byte: a ``MemPool`` over a pluggable allocator hands
PyTorch whatever addresses its allocator returns (host memory, a virtual range never
mapped), and torch_memory_saver's paused regions stay reserved. So PyTorch's reserved
growth over an offload cannot stand for device memory it took from the driver (nor its
fall over a load for memory it gave back): either would let a strategy that moved nothing
read as a release.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from offloadprobe.core.records import GpuReading, PhaseRecord
from offloadprobe.core.roles import Role
from offloadprobe.core.units import gbps
from offloadprobe.engine.descriptors import ReleasesThroughDriver, released_storages
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.runtime.emulation import on_device
from offloadprobe.measure.summary import OFFLOADS

CONFIRMED = 0.97
"""The share of the storages' bytes the driver must have got back to confirm a release."""


def released_outside_pytorch(before: GpuReading, after: GpuReading) -> int:
    """Device bytes given back to the driver between two readings outside PyTorch's
    caching allocator, at least (negative: taken): the fall in ``mem_get_info``'s used
    bytes less what PyTorch handed back meanwhile (``empty_cache``: its reserved bytes
    fell). What PyTorch reserved meanwhile is not added back: the readings cannot tell a
    block it got from the driver from one a pluggable allocator handed it with no device
    memory behind (the module doc), and only the first would hide a release."""
    used = before.device_used_after - after.device_used_after
    return used + min(0, after.reserved_after - before.reserved_after)


def taken_outside_pytorch(before: GpuReading, after: GpuReading) -> int:
    """Device bytes the driver handed out between two readings outside PyTorch's caching
    allocator, at most what a load could have taken (negative: given back): the rise in
    ``mem_get_info``'s used bytes less what PyTorch reserved meanwhile. What PyTorch gave
    back meanwhile is not added: its reserved bytes can fall with no device memory freed
    (a pluggable allocator's segment, a paused region), which would inflate the load."""
    used = after.device_used_after - before.device_used_after
    return used - max(0, after.reserved_after - before.reserved_after)


def driver_delta(strategy: Any, previous: PhaseRecord | None, rec: PhaseRecord) -> int | None:
    """For a strategy that releases through the driver: device bytes the driver got back
    (offloads) or handed out (loads) over the phase outside PyTorch's allocator; else None."""
    if not isinstance(strategy, ReleasesThroughDriver) or previous is None:
        return None
    before, after = previous.gpu, rec.gpu
    if before is None or after is None:
        return None
    if rec.phase in OFFLOADS:
        return max(0, released_outside_pytorch(before, after))
    return max(0, taken_outside_pytorch(before, after))


def measured_transfer(rec: PhaseRecord, grads: int, driver: int | None) -> tuple[PhaseRecord, int]:
    """``rec`` with its bytes moved and rate; ``grads`` is the ``grad_data`` bytes the
    phase freed (offloads) or restored (loads)."""
    device = rec.device_freed_bytes if rec.phase in OFFLOADS else rec.device_allocated_bytes
    if driver is not None:  # outside PyTorch's allocator: the driver's own figure
        device, grads = driver, 0
    moved = max(0, (device or 0) - grads)
    return replace(rec, bytes_moved=moved, gbps=gbps(moved, rec.seconds)), moved


def confirmed_released(
    strategy: Any, models: list[Any], phases: list[PhaseRecord]
) -> frozenset[int]:
    """Storage keys a strategy released through the driver, if the driver agrees: over
    this cycle's offloads, device memory outside PyTorch's allocator went back by at
    least ``CONFIRMED`` of their bytes (``released_outside_pytorch``)."""
    storages = released_storages(strategy, models)
    if not storages:
        return frozenset()
    cycle = phases[-1].cycle
    offloads = [i for i, p in enumerate(phases) if p.cycle == cycle and p.phase in OFFLOADS]
    first, last = phases[offloads[0] - 1].gpu, phases[offloads[-1]].gpu
    claimed = sum(s.nbytes() for s in {s._cdata: s for s in storages}.values())
    if first is None or last is None:
        return frozenset()
    freed = released_outside_pytorch(first, last)
    if freed < CONFIRMED * claimed:
        return frozenset()
    return frozenset(s._cdata for s in storages)


def claimed(state: Any) -> list[tuple[int, int]]:
    """``(address, bytes)`` of the storages a run's strategy says it released through the
    driver, confirmed or not: their addresses need not be mapped, so nothing reads them."""
    storages = released_storages(state.strategy, state.model.strategy_args("params"))
    return [(s.data_ptr(), s.nbytes()) for s in storages]


def grad_device_bytes(model: Any) -> int:
    """Device bytes the gradients of the inventory (megatron: the DDP ``grad_data``
    buffers) hold right now (by fact)."""
    seen: dict[int, int] = {}
    for holding in inventory_of(model):
        if holding.role is not Role.GRADIENTS:
            continue
        storage = holding.tensor.untyped_storage()
        if on_device(holding.tensor):
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())
