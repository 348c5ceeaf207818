"""What a moving phase really moved: device bytes freed or restored, as measured.

Bytes moved are the device memory a phase gave back (offloads) or took (loads), net, less
``grad_data`` (discarded on offload, zeroed on load: nothing is copied). A strategy that
hands memory back to the driver outside PyTorch's allocator is measured by the driver's
own figure (``mem_get_info``) less what PyTorch's caching allocator took or gave back
meanwhile (its reserved bytes), and its storages count as released only when the driver
confirms it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from offloadprobe.core.records import GpuReading, PhaseRecord
from offloadprobe.core.units import gbps
from offloadprobe.engine.descriptors import ReleasesThroughDriver, released_storages
from offloadprobe.engine.model.buffers import ddp_buffers
from offloadprobe.engine.runtime.emulation import on_device
from offloadprobe.measure.summary import OFFLOADS

CONFIRMED = 0.97
"""The share of the storages' bytes the driver must have got back to confirm a release."""


def released_outside_pytorch(before: GpuReading, after: GpuReading) -> int:
    """Device bytes given back to the driver between two readings outside PyTorch's
    caching allocator (negative: taken): the fall in ``mem_get_info``'s used bytes, plus
    what PyTorch reserved meanwhile (a block it cached during the phase is not memory the
    strategy failed to release), less what it handed back (``empty_cache``)."""
    used = before.device_used_after - after.device_used_after
    return used + (after.reserved_after - before.reserved_after)


def driver_delta(strategy: Any, previous: PhaseRecord | None, rec: PhaseRecord) -> int | None:
    """For a strategy that releases through the driver: device bytes the driver got back
    (offloads) or handed out (loads) over the phase outside PyTorch's allocator; else None."""
    if not isinstance(strategy, ReleasesThroughDriver) or previous is None:
        return None
    before, after = previous.gpu, rec.gpu
    if before is None or after is None:
        return None
    change = released_outside_pytorch(before, after)
    return max(0, change if rec.phase in OFFLOADS else -change)


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


def grad_device_bytes(model: Any) -> int:
    """Device bytes the DDP ``grad_data`` buffers hold right now (by fact)."""
    seen: dict[int, int] = {}
    for buffer in ddp_buffers(model.chunks):
        storage = buffer.grad_data.untyped_storage()
        if on_device(buffer.grad_data):
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())
