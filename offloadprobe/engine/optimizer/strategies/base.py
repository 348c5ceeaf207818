"""What an optimizer-state offload strategy is, and the moves the verl-style ones share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from offloadprobe.engine.optimizer.holdings import FP32_GROUPS, megatron_optimizers
from offloadprobe.engine.runtime import Runtime


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


class StateKeyStrategy:
    """verl's pattern: fp32 groups swapped with ``.data = .data.to(...)`` and the named state
    keys replaced in the state dict by ``.to(...)`` copies, nothing else.

    ``.to("cpu", non_blocking=True)`` from CUDA returns a fresh pinned tensor (rounded up by
    PyTorch's pinned allocator) on every offload, and ``.to(device)`` a fresh device tensor
    on every load. A tensor whose storage is already freed (an fp32 shard that is a view
    into a DDP buffer the model strategy freed first) is skipped.
    """

    state_keys: tuple[str, ...] = ()

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _move(self, optimizers: list[Any], device: str | int) -> None:
        for part in megatron_optimizers(optimizers):
            for attr in FP32_GROUPS:
                for group in getattr(part, attr, None) or []:
                    for shard in group:
                        if shard is not None and shard.untyped_storage().nbytes():
                            shard.data = shard.data.to(device, non_blocking=True)
            for state in part.optimizer.state.values():
                for key in self.state_keys:
                    value = state.get(key)
                    if isinstance(value, torch.Tensor):
                        state[key] = value.to(device, non_blocking=True)
        self.runtime.synchronize()

    def offload(self, optimizers: list[Any]) -> None:
        self._move(optimizers, "cpu")

    def load(self, optimizers: list[Any]) -> None:
        self._move(optimizers, torch.cuda.current_device())


HostCopy = Literal["pinned per tensor", "exact", "pageable per tensor", "nothing"]
"""How a strategy's host copies are sized: each tensor ``.to("cpu", non_blocking=True)``
(pinned and rounded up on CUDA), exact-size buffers, fresh pageable copies, or none."""

OPTIMIZER_KEYS = ("master", "exp_avg", "exp_avg_sq")
"""The Adam state ``plan`` accounts: fp32 master weights (a group in classic mode,
``master_param`` with the precision-aware optimizer) and the two moments."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerStrategyInfo:
    """Everything offloadprobe knows about one optimizer-state strategy."""

    name: str
    summary: str
    factory: Callable[..., OptimizerStrategy]
    """Builds the strategy; called with the runtime when it accepts an argument."""
    moved_keys: Callable[[bool], tuple[str, ...]] | None = None
    """``precision_aware -> keys of OPTIMIZER_KEYS it moves``; None: not projectable."""
    host_copy: HostCopy = "nothing"
    emulation: str = "runs as written; pinned requests become ordinary host memory"

    def build(self, runtime: Any) -> OptimizerStrategy:
        from offloadprobe.engine.strategies.base import call_factory

        return call_factory(self.factory, runtime)
