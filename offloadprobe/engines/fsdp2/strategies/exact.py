"""``exact``: the fix, exact-size pinned host storage per shard, made once and reused.

Every device storage the model owns (each ``FSDPParam``'s padded local shard,
``_sharded_param_data``, and any parameter or buffer FSDP does not manage) gets a slice
of exactly its bytes in a host arena page-locked with ``cudaHostRegister``
(``host_arena.py``). An offload first frees the unsharded parameters a forward left
(``reshard()``, as ``model.to`` does) and the gradients, then copies each storage into
its slice and frees it in place; a load copies the bytes back into the same storages.
The host holds the payload once (1.00x, no power-of-two rounding), no padding copy is
made (an uneven shard moves as the one padded storage it is, and stays pinned), no glibc
heap is involved, and from the second cycle the copies run at link speed with nothing
allocated. On a CPU-only host the device is host memory: the slices are ordinary
mappings and the storages are still freed and restored, so the round trip is real.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import (
    can_pin,
    fsdp_params,
    local_tensor,
    reshard,
    synchronize,
)
from offloadprobe.engines.fsdp2.strategies.host_arena import HostArena


def on_device(runtime: Any | None, tensor: Any) -> bool:
    """Whether ``tensor``'s bytes are device memory now: the runtime's answer (by fact) where
    there is one; else a CUDA tensor's, or on a host without CUDA any tensor's (the device
    is host memory there)."""
    import torch

    if runtime is not None and hasattr(runtime, "on_device"):
        return bool(runtime.on_device(tensor))
    wanted = "cuda" if torch.cuda.is_available() else "cpu"
    return bool(tensor.device.type == wanted and tensor.untyped_storage().nbytes() > 0)


def device_storages(tensors: list[Any], runtime: Any | None) -> list[Any]:
    """The distinct non-empty device storages under ``tensors``, in order."""
    found: dict[int, Any] = {}
    for tensor in tensors:
        if tensor is None or not on_device(runtime, tensor):
            continue
        storage = tensor.untyped_storage()
        if storage.nbytes() and storage._cdata not in found:
            found[storage._cdata] = storage
    return list(found.values())


def model_tensors(model: Any) -> list[Any]:
    """What a model strategy moves: each shard's padded storage first, then every
    parameter's local tensor and every buffer (those FSDP does not manage)."""
    tensors = [p._sharded_param_data for p in fsdp_params(model)]
    tensors += [local_tensor(p) for p in model.parameters()]
    tensors += list(model.buffers())
    return tensors


class ArenaStrategy:
    """A strategy whose host copies are slices of one reused ``HostArena``: the model's
    (``ExactPinned``) and the optimizer's (``exact_optimizer.ExactOptimizer``)."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime
        self.arena = HostArena(pin=can_pin(runtime))

    @property
    def registered_bytes(self) -> int:
        """Bytes page-locked outside PyTorch's pinned allocator (declared, cross-checked)."""
        return self.arena.registered_bytes

    def _sync(self) -> None:
        synchronize(self.runtime)


class ExactPinned(ArenaStrategy):
    """Exact-size reused host slice per device storage; device storage freed in place."""

    def offload(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            reshard(model)
            for param in model.parameters():
                param.grad = None  # a model strategy frees gradients; none is restored
            self.arena.offload(device_storages(model_tensors(model), self.runtime), self._sync)

    def load(self, model: Any) -> None:
        self.arena.load(self._sync)

    def host_copy(self, tensor: Any) -> Any | None:
        """Where an offloaded tensor's bytes are now (its storage's host slice)."""
        return self.arena.host_copy(local_tensor(tensor).untyped_storage())

    def close(self) -> None:
        self.arena.close()


STRATEGY = ModelStrategyInfo(
    engines=("fsdp2",),
    name="exact",
    summary="exact-size pinned slice per shard, made once (the fix)",
    factory=ExactPinned,
    emulation="exact-size ordinary host slices (no page-locking); storages freed in place",
)
