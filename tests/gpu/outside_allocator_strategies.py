"""Strategies whose memory PyTorch's allocators never see: CuPy's device pool, CuPy's
pinned allocator (``cudaHostAlloc``), the strategy's own ``cudaHostRegister`` of a numpy
array. Each really moves ``param_data`` off the device (its storage freed) and back bit
for bit. Plugged in as ``tests.gpu.outside_allocator_strategies:X``."""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(-1).view(torch.uint8)


class _Host:
    """A host copy per buffer in memory ``host(nbytes)`` makes (a uint8 torch tensor)."""

    def __init__(self) -> None:
        self.copies: dict[int, torch.Tensor] = {}

    def host(self, nbytes: int) -> torch.Tensor:
        raise NotImplementedError

    def offload(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            source = _as_bytes(buffer.param_data)
            if i not in self.copies:
                self.copies[i] = self.host(source.numel())
            self.copies[i].copy_(source)
            torch.cuda.synchronize()
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            _as_bytes(buffer.param_data).copy_(self.copies[i])
            buffer.grad_data.zero_()
        torch.cuda.synchronize()


class CupyPinned(_Host):
    """Host copies in CuPy's pinned memory (``cudaHostAlloc``, outside PyTorch)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = []

    def host(self, nbytes):
        import cupy

        block = cupy.cuda.alloc_pinned_memory(nbytes)
        self.blocks.append(block)
        array = np.frombuffer(block, dtype=np.uint8, count=nbytes)
        return torch.from_numpy(array)


class OwnHostRegister(_Host):
    """Host copies in numpy arrays the strategy page-locks itself with
    ``cudaHostRegister``, declaring nothing (no ``registered_bytes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrays = []

    def host(self, nbytes):
        array = np.ones(nbytes, dtype=np.uint8)  # touched: resident before registering
        err = int(torch.cuda.cudart().cudaHostRegister(array.ctypes.data, nbytes, 0))
        assert err == 0, f"cudaHostRegister failed: {err}"
        self.arrays.append(array)
        return torch.from_numpy(array)

    def close(self):
        for array in self.arrays:
            torch.cuda.cudart().cudaHostUnregister(ctypes.c_void_p(array.ctypes.data).value)


class CupyDeviceStash:
    """The "offload" copies each buffer into CuPy device memory (its own pool, outside
    PyTorch's allocator) and frees PyTorch's storage: nothing left the GPU."""

    def __init__(self) -> None:
        self.stash = {}

    def offload(self, models):
        import cupy

        for i, buffer in enumerate(ddp_buffers(models)):
            source = _as_bytes(buffer.param_data)
            target = self.stash.get(i)
            if target is None:
                target = self.stash[i] = cupy.empty(source.numel(), dtype=cupy.uint8)
            torch.as_tensor(target, device="cuda").copy_(source)
            torch.cuda.synchronize()
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            _as_bytes(buffer.param_data).copy_(torch.as_tensor(self.stash[i], device="cuda"))
            buffer.grad_data.zero_()
        torch.cuda.synchronize()
