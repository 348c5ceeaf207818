"""The public API for strategy plug-ins: what a third party imports (torch-free).

A model-parameter strategy module exports ``STRATEGY = ModelStrategyInfo(...)``, an
optimizer-state one ``STRATEGY = OptimizerStrategyInfo(...)``; register it under the
entry-point group ``offloadprobe.model_strategies`` (or ``offloadprobe.optimizer_strategies``)
or pass ``--strategy package.module:object``. ``docs/contributing.md`` walks through one.
"""

from offloadprobe.engine.descriptors import (
    OPTIMIZER_KEYS,
    ModelStrategy,
    ModelStrategyInfo,
    OptimizerStrategy,
    OptimizerStrategyInfo,
)
from offloadprobe.engine.model.buffers import (
    ddp_buffers,
    free_storage,
    nbytes,
    restore_storage,
    restore_zeroed_grads,
)
from offloadprobe.layout.pinned import Alloc, Event, Free

__all__ = [
    "OPTIMIZER_KEYS",
    "Alloc",
    "Event",
    "Free",
    "ModelStrategy",
    "ModelStrategyInfo",
    "OptimizerStrategy",
    "OptimizerStrategyInfo",
    "ddp_buffers",
    "free_storage",
    "nbytes",
    "restore_storage",
    "restore_zeroed_grads",
]
