"""``verl_optimizer``: verl's ``offload_fsdp_optimizer(optimizer)`` /
``load_fsdp_optimizer(optimizer, device_id)`` (``verl.utils.fsdp_utils``, read at 1dda039).

Nothing happens while the optimizer has no state. Otherwise, for every parameter of
every group, each tensor in its state (AdamW: ``exp_avg``, ``exp_avg_sq`` and ``step``)
is replaced by its ``.to("cpu", non_blocking=True)`` copy, and by ``.to(device_id,
non_blocking=True)`` at the load. On a GPU each moment's local shard takes one pinned
block of PyTorch's caching host allocator, rounded up to a power of two and cached after
the load. The moments are never padded, so they stay pinned for uneven shards too.
AdamW's ``step`` is a host tensor already; the load moves it to the device, as verl's
does.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.descriptors import OptimizerStrategyInfo


def _move_state(optimizer: Any, device: Any, non_blocking: bool) -> None:
    import torch

    if not optimizer.state:
        return
    with torch.no_grad():
        for group in optimizer.param_groups:
            for param in group["params"]:
                state = optimizer.state[param]
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        state[key] = value.to(device, non_blocking=non_blocking)


class VerlOptimizer:
    """Every optimizer state tensor ``.to("cpu", non_blocking=True)``; back ``.to(device_id,
    non_blocking=True)``."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def offload(self, optimizer: Any) -> None:
        _move_state(optimizer, "cpu", non_blocking=True)

    def load(self, optimizer: Any, device_id: Any) -> None:
        _move_state(optimizer, device_id, non_blocking=True)


STRATEGY = OptimizerStrategyInfo(
    engines=("fsdp2",),
    name="verl_optimizer",
    summary="verl offload_fsdp_optimizer: .to('cpu', non_blocking), pinned",
    factory=VerlOptimizer,
    moved_keys=lambda precision_aware: ("exp_avg", "exp_avg_sq"),
    host_copy="pinned per tensor",
    emulation="each .to('cpu') makes an ordinary host copy",
)
