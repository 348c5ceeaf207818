"""``complete``: every tensor the optimizer holds, into exact-size host buffers kept for reuse.

Whatever the key (``exp_avg``, ``exp_avg_sq``, ``master_param`` fp32 or int16 remainders,
a key a future optimizer adds), the per-state scales, the fp32 groups and the gradients on
the main params: each distinct device storage among them is copied into a host buffer of
exactly its bytes, then freed in place (``untyped_storage().resize_(0)``), so every tensor
and view the optimizer keeps stays the same object. Load gives each storage its bytes back
and copies them in. Host buffers are allocated on the first offload and reused; on CUDA
they are page-locked with ``cudaHostRegister`` (no power-of-two rounding) and unregistered
in ``close()``.

Storages that belong to the DDP buffers (fp32 shards and main grads that are views into
``param_data``/``grad_data``) are left to the model-parameter strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offloadprobe.core.errors import IntegrityError, OffloadProbeError
from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engine.optimizer.holdings import ddp_buffer_tensors, holdings, storage_key

if TYPE_CHECKING:
    import torch

    from offloadprobe.engine.runtime import Runtime

_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context


@dataclass(slots=True)
class _Slot:
    """One device storage the strategy moves, and its host buffer."""

    storage: torch.UntypedStorage
    host: torch.Tensor
    nbytes: int
    offloaded: bool = False


def _byte_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """The whole storage as a flat uint8 tensor (shares its memory)."""
    import torch

    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return flat.set_(storage, 0, (storage.nbytes(),), (1,))


class CompleteStrategy:
    """Exact-size reused host buffer per optimizer storage; device storage freed in place."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.registered_bytes = 0
        """Bytes page-locked outside PyTorch's pinned allocator."""
        self._slots: dict[int, _Slot] = {}

    def _on_device(self, tensor: torch.Tensor, host_by_design: bool) -> bool:
        return not host_by_design and self.runtime.on_device(tensor)

    def _storages(self, optimizers: list[Any]) -> list[torch.UntypedStorage]:
        skip = {storage_key(t) for _, t in ddp_buffer_tensors(optimizers)}
        found: dict[int, torch.UntypedStorage] = {}
        for held in holdings(optimizers):
            key = storage_key(held.tensor)
            if key in skip or key in found or not self._on_device(held.tensor, held.host_by_design):
                continue
            storage = held.tensor.untyped_storage()
            if storage.nbytes():
                found[key] = storage
        return list(found.values())

    def _allocate(self, nbytes: int) -> torch.Tensor:
        import torch

        host = torch.empty(nbytes, dtype=torch.uint8, device="cpu")
        if self.runtime.can_pin:
            err = int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), nbytes, _PORTABLE))
            if err != 0:
                raise OffloadProbeError(
                    f"cudaHostRegister of {nbytes} bytes failed: cudaError {err}"
                )
            self.registered_bytes += nbytes
        return host

    def _slot(self, storage: torch.UntypedStorage) -> _Slot:
        key, nbytes = storage._cdata, storage.nbytes()
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(storage, self._allocate(nbytes), nbytes)
        elif slot.nbytes != nbytes:
            raise IntegrityError(
                f"an optimizer storage of {slot.nbytes} bytes now holds {nbytes}: "
                "the optimizer state was rebuilt between cycles"
            )
        return slot

    def offload(self, optimizers: list[Any]) -> None:
        self.runtime.synchronize()
        moved = [self._slot(storage) for storage in self._storages(optimizers)]
        for slot in moved:
            slot.host.copy_(_byte_view(slot.storage), non_blocking=True)
        self.runtime.synchronize()  # every copy lands before any device storage is freed
        for slot in moved:
            slot.storage.resize_(0)
            slot.offloaded = True

    def load(self, optimizers: list[Any]) -> None:
        for slot in self._slots.values():
            if not slot.offloaded:
                continue
            slot.storage.resize_(slot.nbytes)
            _byte_view(slot.storage).copy_(slot.host, non_blocking=True)
            slot.offloaded = False
        self.runtime.synchronize()

    def close(self) -> None:
        """Unregister every range this strategy page-locked and drop the host buffers."""
        import torch

        if self.runtime.can_pin:
            for slot in self._slots.values():
                torch.cuda.cudart().cudaHostUnregister(slot.host.data_ptr())
        self.registered_bytes = 0
        self._slots.clear()


STRATEGY = OptimizerStrategyInfo(
    name="complete",
    summary="every optimizer tensor, any key, into exact-size reused buffers",
    factory=CompleteStrategy,
    moved_keys=lambda precision_aware: ("master", "exp_avg", "exp_avg_sq"),
    host_copy="exact",
    emulation="exact-size ordinary host buffers, no page-locking",
)
