"""``verl_fsdp2_blocking``: verl's FSDP2 model offload before PR #7347, ``model.cpu()`` then
``empty_cache()``; the load is a blocking ``model.to(device)``.

Each shard gets a fresh pageable host tensor every offload (none is pinned), dropped at
the load: where glibc serves it from its heap (shards under its moving mmap threshold,
up to 32 MiB) the pages stay resident after the free.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import empty_cache, load_device


class VerlFsdp2Blocking:
    """``model.cpu()`` + ``empty_cache()``; back with ``model.to(device)``."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def offload(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            model.cpu()
        empty_cache(self.runtime)

    def load(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            model.to(load_device(self.runtime))


STRATEGY = ModelStrategyInfo(
    engines=("fsdp2",),
    name="verl_fsdp2_blocking",
    summary="verl FSDP2 before PR #7347: model.cpu(), pageable",
    factory=VerlFsdp2Blocking,
    emulation="model.cpu() as written: a fresh host copy per shard every offload",
)
