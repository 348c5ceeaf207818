"""verl's optimizer-offload pattern, shared by ``legacy`` and ``fixed``: fp32 groups swapped
with ``.data = .data.to(...)`` and named state keys replaced by ``.to(...)`` copies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offloadprobe.engine.optimizer.holdings import FP32_GROUPS, megatron_optimizers

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime


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
        import torch

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
        import torch

        self._move(optimizers, torch.cuda.current_device())
