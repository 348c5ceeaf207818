"""One host copy per DDP buffer, made on the first offload and reused: the shape of the fix.

``lazy``, ``registered`` and ``pageable`` differ only in how they allocate the copy
(pinned by PyTorch, registered with CUDA, or pageable); the moves are these. Torch-free
at import: the tensors come from the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offloadprobe.core.errors import IntegrityError
from offloadprobe.engine.model.buffers import (
    free_storage,
    loose_to_load,
    loose_to_offload,
    restore_storage,
    restore_zeroed_grads,
    to_load,
    to_offload,
)
from offloadprobe.engine.optimizer.holdings import storage_key

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime


class HostCopies:
    """One host tensor per DDP buffer, created on first use and checked on reuse."""

    def __init__(self, allocate: Any) -> None:
        self._allocate = allocate
        self._copies: dict[int, Any] = {}

    def for_buffer(self, key: int, like: Any) -> Any:
        host = self._copies.get(key)
        if host is None:
            host = self._copies[key] = self._allocate(like)
        elif host.shape != like.shape or host.dtype != like.dtype:
            raise IntegrityError(
                f"host copy {tuple(host.shape)} {host.dtype} no longer matches its DDP buffer "
                f"{tuple(like.shape)} {like.dtype}: the model's buffers were rebuilt"
            )
        return host

    def get(self, key: int) -> Any:
        return self._copies[key]

    def values(self) -> list[Any]:
        return list(self._copies.values())


class ReusedHostBuffers:
    """Offload into host copies that outlive the cycle; a subclass's ``allocate`` chooses
    the memory (it is called once per buffer, on the first offload). Parameters outside
    the DDP buffers (frozen ones, a reference model's) get a copy each, as frameworks
    move them one by one."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.copies = HostCopies(self.allocate)

    def allocate(self, like: Any) -> Any:
        raise NotImplementedError

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        for buffer in to_offload(models):
            host = self.copies.for_buffer(id(buffer), buffer.param_data)
            host.copy_(buffer.param_data)
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)
        for param in loose_to_offload(models):
            self.copies.for_buffer(storage_key(param), param).copy_(param.detach())
            free_storage(param)

    def load(self, models: list[Any]) -> None:
        for buffer in to_load(models):
            restore_storage(buffer.param_data)
            buffer.param_data.copy_(self.copies.get(id(buffer)))
            restore_zeroed_grads(buffer)
        for param in loose_to_load(models):
            restore_storage(param)
            param.detach().copy_(self.copies.get(storage_key(param)))
        self.runtime.synchronize()
