"""``verl_fsdp2``: verl's FSDP2 model offload since PR #7347, ``model.to("cpu",
non_blocking=True)`` then ``empty_cache()``; the load is ``model.to(device,
non_blocking=True)`` (``verl.utils.fsdp_utils``, read at 1dda039).

On a GPU, a ``non_blocking`` device-to-host ``.to`` takes its host tensor from PyTorch's
caching host allocator: one pinned block per parameter shard, rounded up to a power of
two, which goes back to the allocator's cache at the load and stays page-locked for the
rest of the job. ``FSDPModule._apply`` then calls ``reset_sharded_param()`` on each
parameter: a shard whose dim 0 does not divide by the shard count is replaced by a fresh
zero-padded copy (``new_zeros``, pageable), and its pinned block goes back to the cache.

Like verl, the offload does not synchronize: the host copies are complete only once the
copy stream has run (the load, on the same stream, is ordered after them).
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import empty_cache, load_device


class VerlFsdp2:
    """``model.to("cpu", non_blocking=True)`` + ``empty_cache()``; back with
    ``model.to(device, non_blocking=True)``."""

    non_blocking = True

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def offload(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            model.to("cpu", non_blocking=self.non_blocking)
        empty_cache(self.runtime)

    def load(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            model.to(load_device(self.runtime), non_blocking=self.non_blocking)


STRATEGY = ModelStrategyInfo(
    engines=("fsdp2",),
    name="verl_fsdp2",
    summary="verl FSDP2: model.to('cpu', non_blocking=True), pinned",
    factory=VerlFsdp2,
    emulation="model.to as written; a pinned host copy is an ordinary one, exact size",
)
