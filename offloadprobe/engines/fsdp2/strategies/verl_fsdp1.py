"""``verl_fsdp1``: verl's FSDP1 model offload, each handle's ``flat_param_to`` (a GPU row).

``offload_fsdp_model_to_cpu`` on a ``FullyShardedDataParallel`` root (``verl.utils.
fsdp_utils``, read at 1dda039): after FSDP1's lazy init, for every flat-parameter handle
that does not offload by itself, ``handle.flat_param_to(cpu, non_blocking=True)`` and
then ``flat_param._local_shard = flat_param.data`` (the local shard follows the moved
data); the load does the same towards the current device, then ``empty_cache()`` after
the offload only. The flat parameter is padded at construction, so the moved storage is
one pinned block per handle of the padded flat shard, rounded up to a power of two; no
``reset_sharded_param`` replaces it.

It runs on FSDP1's own ``FlatParameter``, so it needs a model the engine wrapped with
FSDP1, on a GPU: torch 2.13 refuses FSDP1 without an accelerator ("FSDP needs a non-CPU
accelerator device"), and this row refuses a ``fully_shard`` model in one line.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.build import FsdpBuild
from offloadprobe.engines.fsdp2.strategies.common import empty_cache, load_device

BUILD = FsdpBuild(wrap="fsdp1", needs_gpu=True)

REFUSAL = (
    "verl_fsdp1 moves FSDP1's flat parameters: it needs a model wrapped with "
    "FullyShardedDataParallel on a GPU (build with wrap=fsdp1); use verl_fsdp2 here"
)


def _handles(model: Any) -> list[Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp._runtime_utils import _lazy_init

    if not isinstance(model, FullyShardedDataParallel):
        raise UsageError(REFUSAL)
    _lazy_init(model, model)
    if not model._is_root:
        raise UsageError("verl_fsdp1 moves the root FSDP1 module only, as verl asserts")
    return [h for h in model._all_handles if not h._offload_params]


class VerlFsdp1:
    """Each FSDP1 handle's ``flat_param_to(device, non_blocking=True)``, local shard
    re-pointed; ``empty_cache()`` after the offload."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def _move(self, model: Any, device: Any) -> None:
        import torch

        with torch.no_grad():
            for handle in _handles(model):
                handle.flat_param_to(torch.device(device), non_blocking=True)
                handle.flat_param._local_shard = handle.flat_param.data

    def offload(self, model: Any) -> None:
        self._move(model, "cpu")
        empty_cache(self.runtime)

    def load(self, model: Any) -> None:
        device = load_device(self.runtime)
        self._move(model, f"cuda:{device}" if isinstance(device, int) else device)


STRATEGY = ModelStrategyInfo(  # built with BUILD
    engines=("fsdp2",),
    name="verl_fsdp1",
    summary="verl FSDP1: flat_param_to('cpu', non_blocking) (GPU only)",
    factory=VerlFsdp1,
    emulation="refused: FSDP1 needs a GPU in torch 2.13",
)
