"""User strategies for pinned truth on the GPU (issue 35, point 10). Plugged in as
``tests.gpu.pinned_truth_strategies:X``; each really moves ``param_data`` off the device
(its storage freed) and back bit for bit, and declares nothing (no ``registered_bytes``).

- ``PoolRegisterCtypes`` / ``PoolRegisterTorch``: an exact host copy per buffer in a
  page-aligned anonymous mapping, page-locked chunk by chunk with ``cudaHostRegister``
  from a ``ThreadPoolExecutor`` (through the ``libcudart`` torch loaded, by ctypes with the
  GIL released and the portable flag, as ``hugepin`` does; or through
  ``torch.cuda.cudart()``), kept registered while training, as ``registered`` keeps it.
  The bytes it page-locks are exactly the mapping's: ``payload`` rounded up to pages.
- ``FreshPinnedEachOffload``: a fresh ``torch.empty(..., pin_memory=True)`` host copy each
  offload, filled by a ``non_blocking`` copy and dropped at the load after a
  ``non_blocking`` copy back: from cycle 1 on each offload gets the block the last load
  returned to PyTorch's cache. Its pinned blocks in use are one copy after each offload
  and none after each load, every cycle.
"""

from __future__ import annotations

import ctypes
import mmap
from concurrent.futures import ThreadPoolExecutor

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage

CHUNK = 2 * 2**20
THREADS = 4


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(-1).view(torch.uint8)


class _PoolRegister:
    """Host copies in mappings a thread pool page-locks chunk by chunk."""

    def __init__(self) -> None:
        self.maps: dict[int, mmap.mmap] = {}
        self.copies: dict[int, torch.Tensor] = {}
        self.locked: list[int] = []
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="user-register")

    def register(self, address: int, nbytes: int) -> None:
        raise NotImplementedError

    def unregister(self, address: int) -> None:
        raise NotImplementedError

    def _host(self, nbytes: int) -> tuple[mmap.mmap, torch.Tensor]:
        mapping = mmap.mmap(-1, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        starts = range(0, len(mapping), CHUNK)
        sizes = [min(CHUNK, len(mapping) - s) for s in starts]
        list(self.pool.map(self.register, [base + s for s in starts], sizes))  # any error raises
        self.locked += [base + s for s in starts]
        return mapping, torch.frombuffer(mapping, dtype=torch.uint8, count=nbytes)

    def offload(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            source = _as_bytes(buffer.param_data)
            if i not in self.copies:
                self.maps[i], self.copies[i] = self._host(source.numel())
            for start in range(0, source.numel(), CHUNK):  # one copy per registered range:
                end = min(start + CHUNK, source.numel())  # one across two fails on the H200
                self.copies[i][start:end].copy_(source[start:end])
            torch.cuda.synchronize()
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            target = _as_bytes(buffer.param_data)
            for start in range(0, target.numel(), CHUNK):
                end = min(start + CHUNK, target.numel())
                target[start:end].copy_(self.copies[i][start:end])
            buffer.grad_data.zero_()
        torch.cuda.synchronize()

    def close(self):
        list(self.pool.map(self.unregister, self.locked))
        self.pool.shutdown()
        self.copies.clear()


class PoolRegisterCtypes(_PoolRegister):
    """``cudaHostRegister`` through ctypes on torch's own libcudart, portable flag, from
    pool threads (``hugepin``'s route, which CUPTI's MEMORY2 records missed on the H200)."""

    def __init__(self) -> None:
        super().__init__()
        from offloadprobe.engine.hostmem import Cudart

        cudart = Cudart.loaded(torch.cuda.current_device())
        assert cudart is not None, "libcudart is not a loaded shared object here"
        self.cudart = cudart

    def register(self, address: int, nbytes: int) -> None:
        self.cudart.register(address, nbytes)  # binds this thread to the device first

    def unregister(self, address: int) -> None:
        self.cudart.unregister(address)


class PoolRegisterTorch(_PoolRegister):
    """``torch.cuda.cudart().cudaHostRegister`` from pool threads, flags 0."""

    def register(self, address: int, nbytes: int) -> None:
        torch.cuda.set_device(0)
        err = int(torch.cuda.cudart().cudaHostRegister(address, nbytes, 0))
        assert err == 0, f"cudaHostRegister of {nbytes} bytes failed: {err}"

    def unregister(self, address: int) -> None:
        torch.cuda.cudart().cudaHostUnregister(address)


class FreshPinnedEachOffload:
    """A fresh pinned copy each offload; dropped at the load, its block cached and reused."""

    def __init__(self) -> None:
        self.copies: dict[int, torch.Tensor] = {}

    def offload(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            source = _as_bytes(buffer.param_data)
            host = torch.empty(source.numel(), dtype=torch.uint8, pin_memory=True)
            host.copy_(source, non_blocking=True)
            self.copies[i] = host
        torch.cuda.synchronize()
        for buffer in ddp_buffers(models):
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            _as_bytes(buffer.param_data).copy_(self.copies[i], non_blocking=True)
            buffer.grad_data.zero_()
        torch.cuda.synchronize()
        self.copies.clear()  # each block back to the cache, through its stream's event
