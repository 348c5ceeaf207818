"""A module-level cache of device tensors the probe model fills in its forward pass
(``--workspace-cache BYTES``): memory no parameter, buffer or optimizer state references.

TransformerEngine keeps its FP8 weight workspaces this way (verl #6952: 68.3 GiB of them
stayed on the device after an offload); megatron's global memory buffer, rotary caches
and CUDA graph pools are owners of the same kind. Nothing in the model or the optimizer
reaches :data:`WORKSPACES`, so an offload that walks them leaves the cache where it is;
only the device totals (``ledger.py``) can see it.

The cache is filled by a forward pre-hook on each chunk, on the first forward after the
model was built: inside the first train phase, after the strategies were constructed, so
the ledger names it "made during train". A probe model that is freed (the no-offload
reference) takes its entries with it; the run's own model keeps them to the end.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

WORKSPACES: dict[str, torch.Tensor] = {}
"""Cache key -> device tensor, as a library's module-level workspace cache."""


def _fill(key: str, nbytes: int) -> Any:
    def hook(module: Any, args: Any) -> None:
        if key in WORKSPACES:
            return
        weight = next(module.parameters())
        # a stand-in for a cast copy of the weights: device bytes written by the forward
        WORKSPACES[key] = torch.zeros(nbytes, dtype=torch.uint8, device=weight.device)

    return hook


def install(chunks: list[Any], nbytes: int) -> None:
    """Make each chunk's forward fill its share of ``nbytes`` (the first chunk takes the
    remainder) in :data:`WORKSPACES`, once; dropped when the chunk is freed."""
    if nbytes <= 0 or not chunks:
        return
    share, rest = divmod(nbytes, len(chunks))
    for index, chunk in enumerate(chunks):
        key = f"workspace {id(chunk):x}"
        chunk.register_forward_pre_hook(_fill(key, share + (rest if index == 0 else 0)))
        weakref.finalize(chunk, WORKSPACES.pop, key, None)


def cached_bytes() -> int:
    """Bytes held in :data:`WORKSPACES` now."""
    return sum(t.untyped_storage().nbytes() for t in WORKSPACES.values())


def clear() -> None:
    """Drop every cached workspace (what a strategy that knows the cache does on offload)."""
    WORKSPACES.clear()
