"""``mcore``: megatron-core's own optimizer offload, ``offload_to_cpu()`` / ``restore_from_cpu()``.

Called on each optimizer in the list as NeMo-RL and Megatron-LM's RL loop call it (a
ChainedOptimizer forwards to every chained DistributedOptimizer). megatron-core moves
every tensor in the inner optimizer's ``param_groups`` and ``state`` that ``is_cuda``
with ``p.data = p.data.cpu()`` / ``state[k] = v.cpu()`` (pageable, fresh every cycle)
and back with ``.cuda()``, then empties the CUDA cache.

With the precision-aware optimizer the inner optimizer's params are views into the DDP
``param_data`` buffer: if a model strategy freed that buffer first, the ``.cpu()`` reads
freed memory and fails; if not, the param becomes a separate tensor and the view is lost.
offloadprobe runs it as it is and reports what happens.

In CPU emulation ``is_cuda`` is made to answer as on a GPU for the duration of the calls
(see :func:`offloadprobe.engine.runtime.emulation.is_cuda_as_on_gpu`), so the same tensors
move as would on a GPU.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engine.model.buffers import require_methods

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime

OPTIMIZER_METHODS = ("offload_to_cpu", "restore_from_cpu")


class McoreOptimizerStrategy:
    """``MegatronOptimizer.offload_to_cpu()`` / ``restore_from_cpu()`` on each optimizer."""

    def __init__(self, runtime: Runtime) -> None:
        from megatron.core.optimizer import MegatronOptimizer

        require_methods(MegatronOptimizer, OPTIMIZER_METHODS, "MegatronOptimizer")
        self.runtime = runtime

    def _flags(self) -> contextlib.AbstractContextManager[None]:
        from offloadprobe.engine.runtime import emulation

        return emulation.is_cuda_as_on_gpu() if self.runtime.emulated else contextlib.nullcontext()

    def offload(self, optimizers: list[Any]) -> None:
        with self._flags():
            for optimizer in optimizers:
                optimizer.offload_to_cpu()
        self.runtime.synchronize()

    def load(self, optimizers: list[Any]) -> None:
        with self._flags():
            for optimizer in optimizers:
                optimizer.restore_from_cpu()
        self.runtime.synchronize()


STRATEGY = OptimizerStrategyInfo(
    name="mcore",
    summary="megatron-core's own optimizer offload_to_cpu (pageable copies)",
    factory=McoreOptimizerStrategy,
    moved_keys=lambda precision_aware: ("master", "exp_avg", "exp_avg_sq"),
    host_copy="pageable per tensor",
    emulation="megatron's code as written; is_cuda answers as on a GPU during the calls",
)
