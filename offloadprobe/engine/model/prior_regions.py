"""Device allocations the process held before the measured model was built, and whether
each is still the same bytes: the ``param_copies`` search leaves those alone.

Before the measured model is built, a run trains models of its own: the no-offload
reference and the warm-up (``engine.zero``), the same configuration from the same seed,
so their weights are the measured model's, byte for byte. Where megatron-core keeps such
a model alive after it is dropped (an MoE model under expert parallelism stays in a
reference cycle through the autograd graph's C++ nodes, which Python's collector cannot
break, on a GPU as in CPU emulation), its buffers are copies of the parameters that no
strategy made. No strategy code has run yet when they are listed here, so they are not a
strategy's; what a strategy writes into one later is: a region is left out of the search
only while it is the same allocation (address and size) holding the same bytes (two
digests over its 8-byte words: their wrapping sum and the wrapping sum of their squares).

Limit: on CUDA, a block freed after the listing and handed out again at the same address
and size, holding the same bytes, reads as the same allocation (it would take code that
frees the tool's own models and rewrites their exact bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.engine.model.device_regions import Region, regions_of, words_of


def _digest(region: Region) -> tuple[int, int]:
    with torch._C.DisableTorchFunction(), torch.no_grad():
        words = words_of(region)
        return int(words.sum()), int((words * words).sum())


@dataclass
class PriorRegions:
    """The allocations before the build, by ``(address, bytes)``, with their digests."""

    digests: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def take(cls, runtime: Any) -> PriorRegions:
        found = {}
        for region in regions_of(runtime):
            if region.nbytes >= 16:
                found[(region.address, region.nbytes)] = _digest(region)
        return cls(found)

    def unchanged(self, runtime: Any) -> list[tuple[int, int]]:
        """``(address, bytes)`` of every listed allocation still there with its bytes."""
        if not self.digests:
            return []
        kept = []
        for region in regions_of(runtime):
            key = (region.address, region.nbytes)
            if key in self.digests and _digest(region) == self.digests[key]:
                kept.append(key)
        return kept


__all__ = ["PriorRegions"]
