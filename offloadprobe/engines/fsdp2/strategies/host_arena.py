"""Exact-size host storage for device storages, made once and reused: the fixed rows' core.

Each device storage the strategy moves gets a slice of exactly its bytes in a host
arena: an anonymous mapping of its own (page-aligned, shared with no other allocation),
page-locked with ``cudaHostRegister`` where CUDA exists, so nothing is rounded up to a
power of two and no glibc heap holds it. The arena is made at the first offload that
meets the storages (a later offload that meets new ones, an optimizer state made after
the first offload, adds one more) and reused every cycle. An offload ``copy_``s every
storage into its slice, waits for the copies, then frees the device storage in place
(``untyped_storage().resize_(0)``): every tensor and view over it stays the same object,
so FSDP2's ``reset_sharded_param`` never runs and an uneven shard's padded storage keeps
its home. A load gives each storage its bytes back and copies them in.
"""

from __future__ import annotations

import contextlib
import mmap
from dataclasses import dataclass
from typing import Any

from offloadprobe.core.errors import IntegrityError, OffloadProbeError

_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context
ALIGN = 512
"""Each slice starts on a 512-byte boundary (a DMA-friendly start; under 512 bytes of
slack per storage, against a power of two's up to 100%)."""


def byte_view(storage: Any) -> Any:
    """The whole storage as a flat uint8 tensor sharing its memory."""
    import torch

    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return flat.set_(storage, 0, (storage.nbytes(),), (1,))


@dataclass(slots=True)
class Slot:
    """One device storage and its exact-size host slice."""

    storage: Any
    """Kept referenced, so its identity (``_cdata``) cannot be taken by another."""
    host: Any
    nbytes: int
    offloaded: bool = False


class _Block:
    """One anonymous mapping, page-locked where CUDA exists, as a uint8 tensor."""

    def __init__(self, nbytes: int, pin: bool) -> None:
        import torch

        self.nbytes = nbytes
        private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS  # not shared memory (Python's default)
        self.mapping = mmap.mmap(-1, max(nbytes, 1), flags=private)
        self.tensor = torch.frombuffer(self.mapping, dtype=torch.uint8, count=nbytes)
        self.pinned = False
        if pin and nbytes:
            cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            err = int(cudart.cudaHostRegister(self.tensor.data_ptr(), nbytes, _PORTABLE))
            if err != 0:
                raise OffloadProbeError(f"cudaHostRegister of {nbytes} bytes failed: error {err}")
            self.pinned = True

    def close(self) -> None:
        import torch

        if self.pinned:
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())  # type: ignore[no-untyped-call]
            self.pinned = False
        del self.tensor
        # a slice still referenced (a caller's) keeps the mapping until it goes
        with contextlib.suppress(BufferError):
            self.mapping.close()


class HostArena:
    """Slots by device storage (``_cdata``), in blocks made once per set of new storages."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self.slots: dict[int, Slot] = {}
        self._blocks: list[_Block] = []

    @property
    def host_bytes(self) -> int:
        """Bytes of host memory the arena holds (its mappings, page-rounded)."""
        return sum(-(-b.nbytes // mmap.PAGESIZE) * mmap.PAGESIZE for b in self._blocks)

    @property
    def registered_bytes(self) -> int:
        """Bytes this arena page-locked outside PyTorch's allocator."""
        return sum(b.nbytes for b in self._blocks if b.pinned)

    def slots_for(self, storages: list[Any]) -> list[Slot]:
        """The slot of each storage, making one block for those seen the first time."""
        fresh = [s for s in storages if s._cdata not in self.slots]
        for storage in storages:
            slot = self.slots.get(storage._cdata)
            if slot is not None and slot.nbytes != storage.nbytes():
                raise IntegrityError(
                    f"a storage of {slot.nbytes} bytes now holds {storage.nbytes()}: "
                    "the model or optimizer was rebuilt between cycles"
                )
        if fresh:
            offsets, end = [], 0
            for storage in fresh:
                offsets.append(end)
                end += -(-storage.nbytes() // ALIGN) * ALIGN
            block = _Block(end, self.pin)
            self._blocks.append(block)
            for storage, start in zip(fresh, offsets, strict=True):
                n = storage.nbytes()
                self.slots[storage._cdata] = Slot(storage, block.tensor[start : start + n], n)
        return [self.slots[s._cdata] for s in storages]

    def offload(self, storages: list[Any], synchronize: Any) -> None:
        """Copy each storage into its slice; once every copy landed, free them all."""
        moved = [slot for slot in self.slots_for(storages) if not slot.offloaded]
        synchronize()  # the device's pending work on these storages first
        for slot in moved:
            slot.host.copy_(byte_view(slot.storage), non_blocking=True)
        synchronize()  # every copy lands before any device storage is freed
        for slot in moved:
            slot.storage.resize_(0)
            slot.offloaded = True

    def load(self, synchronize: Any) -> None:
        """Give every offloaded storage its bytes back and copy them in."""
        for slot in self.slots.values():
            if slot.offloaded:
                slot.storage.resize_(slot.nbytes)
                byte_view(slot.storage).copy_(slot.host, non_blocking=True)
                slot.offloaded = False
        synchronize()

    def host_copy(self, storage: Any) -> Any | None:
        """The host slice holding an offloaded storage's bytes; None where it has none."""
        slot = self.slots.get(storage._cdata)
        return slot.host if slot is not None and slot.offloaded else None

    def close(self) -> None:
        """Unregister and unmap every block (the slots go with them)."""
        self.slots.clear()
        for block in self._blocks:
            block.close()
        self._blocks.clear()
