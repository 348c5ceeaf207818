"""Device memory by totals: what the process holds on its device, whoever holds it.

The residency audit (``audit.py``) names what the model and the optimizer reference; a
strategy can hold device memory nothing references (a copy in a tensor of its own, a
buffer a library made outside PyTorch's allocator). The totals hold all of it:

- on CUDA: PyTorch's allocated bytes, plus this process's device allocations beyond
  PyTorch's reserved bytes (CuPy, NCCL, CUDA graph pools, another allocator): by CUPTI's
  records where it records, else the driver's used bytes (``mem_get_info``, which
  other processes on the same GPU move too);
- in CPU emulation: the emulated device's own total.

``walk`` finds the live Python tensors on the device that the audit does not reach, to
name what it can; what neither names is ``unattributed``.
"""

from __future__ import annotations

import gc
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from offloadprobe.engine.optimizer.holdings import is_wrapper
from offloadprobe.engine.runtime import emulation
from offloadprobe.measure import cupti_memory


@dataclass(frozen=True, slots=True)
class DeviceTotal:
    """The process's device bytes at one moment, split by who allocated them."""

    allocated: int
    """Through PyTorch's caching allocator (the emulated device's total in CPU emulation)."""
    outside: int
    """Outside PyTorch's allocator (0 in CPU emulation): CUPTI's device allocations, or the
    driver's used bytes, less PyTorch's reserved ones. Without CUPTI it includes the CUDA
    context and other processes: read as a change."""

    @property
    def total(self) -> int:
        return self.allocated + self.outside


def device_total(runtime: Any) -> DeviceTotal:
    """The device bytes this process holds now (after what nothing references is freed)."""
    runtime.synchronize()
    memory = runtime.device_memory
    if memory is not None:
        runtime.settle()
        return DeviceTotal(allocated=memory.device_bytes(), outside=0)
    reserved = torch.cuda.memory_reserved()
    outside = cupti_memory.outside_pytorch(reserved)  # this process's own allocations
    if outside is None:  # the whole device's count: other processes on the GPU move it too
        free, total = torch.cuda.mem_get_info()
        outside = max(0, total - free - reserved)
    return DeviceTotal(allocated=torch.cuda.memory_allocated(), outside=outside)


def _device_storage(obj: object) -> Any:
    """The device storage a live tensor (or, on CUDA, storage object) holds, or None."""
    if isinstance(obj, torch.Tensor):
        if obj.is_meta or is_wrapper(obj):
            return None  # a DTensor: its inner tensors are walked themselves
        try:
            return obj.untyped_storage() if emulation.on_device(obj) else None
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return None
    if isinstance(obj, torch.UntypedStorage) and obj.device.type == "cuda" and obj.nbytes():
        return obj
    return None


def walk(known: set[int]) -> dict[int, int]:
    """Every live Python tensor or storage object whose storage is on the device and not in
    ``known``: ``{storage key: bytes}`` (each storage once, its allocated size).

    In CPU emulation a bare storage object counts where Python code other than the emulated
    device's registry holds it (``DeviceMemory.held_in_python``)."""
    found: dict[int, int] = {}
    # isinstance on some objects warns (torch.distributed.reduce_op's deprecation): the
    # walk is not the user's code, and its warnings would be attributed to this file
    with torch._C.DisableTorchFunction(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            storage = _device_storage(obj)
            if storage is None:
                continue
            key = storage._cdata
            if key not in known and key not in found and storage.nbytes():
                found[key] = storage.nbytes()
    memory = emulation.active()
    if memory is not None:  # after the walk: its list of every object is gone
        for key, nbytes in memory.held_in_python().items():
            if key not in known:
                found.setdefault(key, nbytes)
    return found
