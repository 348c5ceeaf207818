"""What a model-parameter offload strategy is, and the buffer helpers strategies share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class ModelStrategy(Protocol):
    """An offload + load pair over megatron DDP chunks, verl's signature.

    ``offload(models)`` moves every buffer's ``param_data`` to host memory and frees
    its device storage, and frees ``grad_data``'s storage. ``load(models)`` restores
    both, with grads zeroed.
    """

    def offload(self, models: list[Any]) -> None: ...

    def load(self, models: list[Any]) -> None: ...


def ddp_buffers(models: list[Any]) -> Iterator[Any]:
    """Every ``_ParamAndGradBuffer`` of every chunk, dense then expert-parallel."""
    for chunk in models:
        yield from chunk.buffers
        yield from getattr(chunk, "expert_parallel_buffers", None) or []


def nbytes(tensor: torch.Tensor) -> int:
    """Logical bytes of a tensor (its storage may be freed)."""
    return tensor.numel() * tensor.element_size()


def free_storage(tensor: torch.Tensor) -> None:
    """Release a buffer's storage while every view into it stays a valid object."""
    tensor.untyped_storage().resize_(0)


def restore_storage(tensor: torch.Tensor) -> None:
    """Give a freed buffer its storage back (contents undefined until written)."""
    storage = tensor.untyped_storage()
    if storage.size() == 0:
        storage.resize_(nbytes(tensor))


def restore_zeroed_grads(buffer: Any) -> None:
    """Reallocate ``grad_data`` and zero it, as a fresh phase expects."""
    restore_storage(buffer.grad_data)
    buffer.grad_data.zero_()
