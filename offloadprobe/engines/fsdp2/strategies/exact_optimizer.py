"""``exact_optimizer``: the fix for the optimizer state, an exact-size pinned host slice per
state tensor, made once and reused (``host_arena.py``).

Every device storage among the optimizer's state tensors (AdamW's ``exp_avg`` and
``exp_avg_sq`` local shards; ``step`` where it lives on the device) is copied into its
slice and freed in place, so the state dict keeps the same tensor objects; the load
copies the bytes back. The parameters are the model strategy's and are not touched.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import local_tensor
from offloadprobe.engines.fsdp2.strategies.exact import ArenaStrategy, device_storages


def state_tensors(optimizer: Any) -> list[Any]:
    """Every tensor in the optimizer's state (local shards of DTensors), in order."""
    import torch

    return [
        local_tensor(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]


class ExactOptimizer(ArenaStrategy):
    """Exact-size reused host slice per optimizer state storage; freed in place."""

    def offload(self, optimizer: Any) -> None:
        storages = device_storages(state_tensors(optimizer), self.runtime)
        self.arena.offload(storages, self._sync)

    def load(self, optimizer: Any) -> None:
        self.arena.load(self._sync)

    def host_copy(self, tensor: Any) -> Any | None:
        return self.arena.host_copy(local_tensor(tensor).untyped_storage())

    def close(self) -> None:
        self.arena.close()


STRATEGY = OptimizerStrategyInfo(
    engines=("fsdp2",),
    name="exact_optimizer",
    summary="every state tensor into an exact-size pinned slice, reused",
    factory=ExactOptimizer,
    moved_keys=lambda precision_aware: ("exp_avg", "exp_avg_sq"),
    host_copy="exact",
    emulation="exact-size ordinary host slices (no page-locking); storages freed in place",
)
