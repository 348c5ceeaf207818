"""What a model-parameter offload strategy is, its descriptor, and the buffer helpers.

A strategy is one module of this package that exports ``STRATEGY``, a
:class:`ModelStrategyInfo`: the factory of the object that offloads and loads, a
one-line summary, the host allocations it makes per cycle (what ``plan`` replays), and
how it behaves in CPU emulation. Nothing outside the module branches on its name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from offloadprobe.layout.pinned import Event


@runtime_checkable
class ModelStrategy(Protocol):
    """An offload + load pair over megatron DDP chunks, verl's signature.

    ``offload(models)`` moves every buffer's ``param_data`` to host memory and frees
    its device storage, and frees ``grad_data``'s storage. ``load(models)`` restores
    both, with grads zeroed.
    """

    def offload(self, models: list[Any]) -> None: ...

    def load(self, models: list[Any]) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """Optional: release what the strategy holds outside PyTorch (called once, at the end)."""

    def close(self) -> None: ...


@runtime_checkable
class RegistersHostMemory(Protocol):
    """Optional: bytes the strategy page-locked itself (``cudaHostRegister``), which
    PyTorch's pinned-allocator statistics cannot see."""

    registered_bytes: int


@runtime_checkable
class ReleasesThroughDriver(Protocol):
    """Optional: the strategy hands device memory back to the driver outside PyTorch's
    allocator (CUDA virtual memory unmapped, addresses kept), so PyTorch still counts those
    storages as allocated. Named here, they count as off the device only when the driver's
    own figure (``mem_get_info``) confirms the bytes came back."""

    def released_storages(self, models: list[Any]) -> list[torch.UntypedStorage]: ...


def released_storages(strategy: object, models: list[Any]) -> list[torch.UntypedStorage]:
    """The storages a strategy says it released through the driver (none for most)."""
    if isinstance(strategy, ReleasesThroughDriver):
        return strategy.released_storages(models)
    return []


HostEvents = Callable[[Sequence[int], int, Sequence[str]], list[Event]]
"""``(param bytes per buffer, cycles, buffer labels) -> host allocations and frees``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStrategyInfo:
    """Everything offloadprobe knows about one model-parameter strategy."""

    name: str
    summary: str
    """One line: what it does (the help text and the run's description)."""
    factory: Callable[..., ModelStrategy]
    """Builds the strategy; called with the runtime when it accepts an argument."""
    host_events: HostEvents | None = None
    """The host allocations and frees of its offloads, buffer by buffer and cycle by cycle,
    replayed by ``plan`` through the pinned-allocator model; None: not projectable."""
    emulation: str = "runs as written; pinned requests become ordinary host memory"
    """How it behaves in CPU emulation, in words."""
    moves_params: bool = True
    """False only for ``none``: parameters are meant to stay on the device."""

    def build(self, runtime: Any) -> ModelStrategy:
        return call_factory(self.factory, runtime)


def call_factory(factory: Callable[..., Any], runtime: Any) -> Any:
    """Call ``factory(runtime)`` when it takes an argument, else ``factory()``; an object
    that is not callable (an instance) is returned as it is."""
    if not callable(factory) or (not inspect.isclass(factory) and hasattr(factory, "offload")):
        return factory
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return factory(runtime)
    takes = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
    return factory(runtime) if takes else factory()


def registered_bytes(strategy: object) -> int:
    """Bytes a strategy page-locked outside PyTorch's allocator (0 when it declares none)."""
    return int(strategy.registered_bytes) if isinstance(strategy, RegistersHostMemory) else 0


def close(strategy: object) -> None:
    """Call the optional ``close`` hook."""
    if isinstance(strategy, Closes):
        strategy.close()


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
