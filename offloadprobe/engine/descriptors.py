"""What a strategy plug-in is: its protocols, its descriptor, and the optional hooks.

A strategy plug-in is one module that exports ``STRATEGY``, a descriptor: the factory of
the object that offloads and loads, a one-line summary, what ``plan`` needs to project it,
and how it behaves in CPU emulation. Descriptor modules import no torch: ``plan``, ``show``
and ``--help`` read them without it. A factory may be the class itself (its module then
imports torch inside its methods) or a ``"package.module:object"`` string, imported only
when the strategy is built.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from offloadprobe.layout.pinned import Event

PART_PARAMS = "params"
PART_OPTIMIZER = "optimizer"
Part = Literal["params", "optimizer"]
"""Which part of the training state a strategy moves: the model's DDP buffers or the
optimizer's state. A name may exist in both registries (``mcore``, ``none``)."""


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
class OptimizerStrategy(Protocol):
    """An offload + load pair over ``[model.optimizer]``, verl's signature.

    ``optimizers`` is a list of megatron optimizers (a ChainedOptimizer or a
    DistributedOptimizer); iterate ``chained_optimizers`` to reach each
    DistributedOptimizer and its inner Adam. ``offload`` moves optimizer state to host
    memory; ``load`` brings it back bit for bit.
    """

    def offload(self, optimizers: list[Any]) -> None: ...

    def load(self, optimizers: list[Any]) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """Optional: release what the strategy holds outside PyTorch (called once, at the end)."""

    def close(self) -> None: ...


@runtime_checkable
class RegistersHostMemory(Protocol):
    """Optional: bytes the strategy says it page-locked itself (``cudaHostRegister``). A
    declaration, cross-checked against what was measured, never the source of a figure."""

    registered_bytes: int


@runtime_checkable
class ReleasesThroughDriver(Protocol):
    """Optional: the strategy hands device memory back to the driver outside PyTorch's
    allocator (CUDA virtual memory unmapped, addresses kept), so PyTorch still counts those
    storages as allocated. Named here, they count as off the device only when the driver's
    own figure (``mem_get_info``) confirms the bytes came back."""

    def released_storages(self, models: list[Any]) -> list[Any]: ...


@runtime_checkable
class HasNotes(Protocol):
    """Optional: what the run's report should say about the strategy (a refused huge-page
    advice, a fallback it took), one line each."""

    notes: list[str]


def notes_of(strategy: object) -> list[str]:
    return [str(n) for n in strategy.notes] if isinstance(strategy, HasNotes) else []


def released_storages(strategy: object, models: list[Any]) -> list[Any]:
    """The storages a strategy says it released through the driver (none for most)."""
    if isinstance(strategy, ReleasesThroughDriver):
        return strategy.released_storages(models)
    return []


def registered_bytes(strategy: object) -> int:
    """Bytes a strategy declares it page-locked outside PyTorch's allocator (0 if none)."""
    return int(strategy.registered_bytes) if isinstance(strategy, RegistersHostMemory) else 0


def close(strategy: object) -> None:
    """Call the optional ``close`` hook."""
    if isinstance(strategy, Closes):
        strategy.close()


HostEvents = Callable[[Sequence[int], int, Sequence[str]], "list[Event]"]
"""``(param bytes per buffer, cycles, buffer labels) -> host allocations and frees``."""

HostCopy = Literal["pinned per tensor", "exact", "pageable per tensor", "nothing"]
"""How an optimizer strategy's host copies are sized: each tensor ``.to("cpu",
non_blocking=True)`` (pinned and rounded up on CUDA), exact-size buffers, fresh pageable
copies, or none."""

OPTIMIZER_KEYS = ("master", "exp_avg", "exp_avg_sq")
"""The Adam state ``plan`` accounts: fp32 master weights (a group in classic mode,
``master_param`` with the precision-aware optimizer) and the two moments."""

Factory = Callable[..., Any] | str
"""A class, a callable, an instance, or ``"package.module:object"`` imported on build."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStrategyInfo:
    """Everything offloadprobe knows about one model-parameter strategy."""

    name: str
    summary: str
    """One line: what it does (the help text and the run's description)."""
    factory: Factory
    """Builds the strategy; called with the runtime when it accepts an argument."""
    host_events: HostEvents | None = None
    """The host allocations and frees of its offloads, buffer by buffer and cycle by cycle,
    replayed by ``plan`` through the pinned-allocator model; None: not projectable."""
    emulation: str = "runs as written; pinned requests become ordinary host memory"
    """How it behaves in CPU emulation, in words."""
    moves_params: bool = True
    """False where its offload is not meant to move parameters: ``none`` keeps them on the
    device; FSDP2's ``CPUOffloadPolicy`` rows keep them in host memory all the time."""
    part: Part = PART_PARAMS
    check_options: Callable[[Mapping[str, str]], object] | None = None
    """Raises ``UsageError`` for ``--strategy-option`` pairs it does not take, in the parent
    before any worker starts (torch-free); None: it reads no options."""
    engines: tuple[str, ...] = ("megatron",)
    """The engines it serves (``core.engines``); empty: any (a user's own code, which is
    called with whatever the engine's strategies receive)."""

    def build(self, runtime: Any) -> Any:
        return call_factory(self.factory, runtime)

    def serves(self, engine: str) -> bool:
        return not self.engines or engine in self.engines


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerStrategyInfo:
    """Everything offloadprobe knows about one optimizer-state strategy."""

    name: str
    summary: str
    factory: Factory
    """Builds the strategy; called with the runtime when it accepts an argument."""
    moved_keys: Callable[[bool], tuple[str, ...]] | None = None
    """``precision_aware -> keys of OPTIMIZER_KEYS it moves``; None: not projectable."""
    host_copy: HostCopy = "nothing"
    emulation: str = "runs as written; pinned requests become ordinary host memory"
    part: Part = PART_OPTIMIZER
    engines: tuple[str, ...] = ("megatron",)
    """The engines it serves (``core.engines``); empty: any (a user's own code, which is
    called with whatever the engine's strategies receive)."""

    def build(self, runtime: Any) -> Any:
        return call_factory(self.factory, runtime)

    def serves(self, engine: str) -> bool:
        return not self.engines or engine in self.engines

    def moves(self, precision_aware: bool) -> bool:
        """Whether it moves anything; a strategy that does not say (the user's) moves."""
        return self.moved_keys is None or bool(self.moved_keys(precision_aware))


def call_move(action: Callable[..., Any], arg: Any, device: Any) -> Any:
    """A strategy's ``offload(arg)`` or ``load(arg)``; a load that takes a device id after
    its argument (``load(optimizer, device_id)``, verl's FSDP signature) gets ``device``,
    one with a keyword-only ``device`` (a function pair's) gets it by name."""
    from offloadprobe.engine.strategies.user_calls import takes_device

    try:
        sig = inspect.signature(action)
    except (TypeError, ValueError):
        return action(arg)
    if takes_device(sig):
        return action(arg, device)
    device_kw = sig.parameters.get("device")
    if device_kw is not None and device_kw.kind is inspect.Parameter.KEYWORD_ONLY:
        return action(arg, device=device)
    return action(arg)


def resolve(factory: Factory) -> Any:
    """The factory itself, or the object a ``"module:object"`` string names."""
    if not isinstance(factory, str):
        return factory
    module, _, attr = factory.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def call_factory(factory: Factory, runtime: Any) -> Any:
    """Call ``factory(runtime)`` when it takes an argument, else ``factory()``; an object
    that is not callable (an instance) is returned as it is."""
    factory = resolve(factory)
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
