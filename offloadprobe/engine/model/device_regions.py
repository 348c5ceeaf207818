"""The device allocations the measured process holds, as the device itself keeps them,
and their bytes read where they lie (``param_copies`` searches them).

- CPU emulation: every allocated storage of the emulated device's registry;
- CUDA: every active block of the default pool in PyTorch's caching allocator
  (``torch.cuda.memory_snapshot``), up to the bytes its allocation requested. A
  ``MemPool``'s allocator may hand out addresses that are not mapped (a paused
  torch_memory_saver region), so no other pool is read.

A region is read through a storage over its address (``_construct_storage_from_data_
pointer``): no copy, and no Python object of the measured code need reference it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class Region:
    """One device allocation to search: its address and bytes."""

    address: int
    nbytes: int
    device: torch.device


def emulated_regions(memory: Any) -> list[Region]:
    """Every allocated storage of the emulated device (CPU emulation)."""
    cpu = torch.device("cpu")
    return [Region(s.data_ptr(), s.nbytes(), cpu) for s in memory.storages() if s.nbytes()]


def cuda_regions(snapshot: list[dict[str, Any]], device: int) -> list[Region]:
    """Every active block of the default pool of ``device`` in a
    ``torch.cuda.memory_snapshot()`` (see the module for why no other pool)."""
    found = []
    where = torch.device("cuda", device)
    for segment in snapshot:
        if segment.get("device", device) != device:
            continue
        if tuple(segment.get("segment_pool_id") or (0, 0)) != (0, 0):
            continue
        address = int(segment["address"])
        for block in segment.get("blocks", []):
            start = int(block.get("address", address))
            # the bytes the allocation asked for: the block's rounding beyond them is no
            # tensor's, and holds whatever was there before (a freed twin model's
            # parameters, the same bytes: read as a copy of them)
            used = int(block.get("requested_size") or block["size"])
            if block.get("state") == "active_allocated" and used:
                found.append(Region(start, used, where))
            address = start + int(block["size"])
    return found


def words_of(region: Region) -> torch.Tensor:
    """The region's whole 8-byte words, as int64, over its memory (no copy)."""
    storage = torch._C._construct_storage_from_data_pointer(
        region.address, region.device, region.nbytes
    )
    raw = torch.empty(0, dtype=torch.uint8, device=region.device)
    raw.set_(storage, 0, (region.nbytes,), (1,))
    return raw[: region.nbytes // 8 * 8].view(torch.int64)


def regions_of(runtime: Any) -> list[Region]:
    """Every device allocation the measured process holds now, as the device keeps them."""
    memory = runtime.device_memory
    if memory is not None:
        return emulated_regions(memory)
    device = torch.cuda.current_device()
    snapshot: Any = torch.cuda.memory_snapshot
    try:  # without the allocation history's stack traces where torch can leave them out
        segments = snapshot(include_traces=False)
    except TypeError:  # an older torch (no include_traces)
        segments = snapshot()
    return cuda_regions(segments, device)


def device_bytes(runtime: Any) -> int:
    """The device bytes allocated now (sizes the anchors), read without settling anything."""
    memory = runtime.device_memory
    return memory.device_bytes() if memory is not None else torch.cuda.memory_allocated()


def storage_range(tensor: torch.Tensor) -> tuple[int, int]:
    """``(address, bytes)`` of a tensor's storage."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()
