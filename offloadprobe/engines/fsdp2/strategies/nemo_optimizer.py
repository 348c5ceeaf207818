"""``nemo_optimizer``: NeMo-RL's DTensor policy worker's ``move_optimizer_to_device``
(``dtensor_policy_worker_v2.py``, read at 7ea279a), with the ``gc.collect()`` and
``empty_cache()`` its ``offload_before_refit`` follows it with.

Every tensor of every parameter's state (DTensor or not) is replaced by a blocking
``.to(device)`` copy: one fresh pageable host tensor per moment every offload, dropped
at the load.
"""

from __future__ import annotations

import gc
from typing import Any

from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import empty_cache, load_device


class NemoOptimizer:
    """Each state tensor ``.to(device)`` (blocking), both ways; ``gc.collect()`` and
    ``empty_cache()`` after the offload."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    @staticmethod
    def _move(optimizer: Any, device: Any) -> None:
        import torch

        with torch.no_grad():
            for state in optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        state[key] = value.to(device)

    def offload(self, optimizer: Any) -> None:
        self._move(optimizer, "cpu")
        gc.collect()
        empty_cache(self.runtime)

    def load(self, optimizer: Any) -> None:
        self._move(optimizer, load_device(self.runtime))


STRATEGY = OptimizerStrategyInfo(
    engines=("fsdp2",),
    name="nemo_optimizer",
    summary="NeMo-RL move_optimizer_to_device: blocking .to (pageable)",
    factory=NemoOptimizer,
    moved_keys=lambda precision_aware: ("exp_avg", "exp_avg_sq"),
    host_copy="pageable per tensor",
    emulation="each .to('cpu') makes an ordinary host copy",
)
