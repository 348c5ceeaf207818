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

In CPU emulation an allocation is the same one only while it is the same storage object
(the registry's: a storage freed at a reclaim and another made at its address and size,
the measured model's with the twin's bytes, is searched). Limit: on CUDA, a block freed
after the listing and handed out again at the same address and size, holding the same
bytes, reads as the same allocation (blocks have no identity to read there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.engine.model.device_regions import Region, regions_of, words_of


def _identities(runtime: Any) -> dict[int, int]:
    """CPU emulation: ``{address: the storage's identity}`` of every emulated device storage
    (its registry holds each by a strong reference, so an identity names one allocation
    for as long as it is listed); empty on CUDA, where blocks have no identity to read."""
    memory = getattr(runtime, "device_memory", None)
    if memory is None:
        return {}
    return {s.data_ptr(): s._cdata for s in memory.storages() if s.nbytes()}


def _digest(region: Region) -> tuple[int, int]:
    with torch._C.DisableTorchFunction(), torch.no_grad():
        words = words_of(region)
        return int(words.sum()), int((words * words).sum())


@dataclass
class PriorRegions:
    """The allocations before the build, by ``(address, bytes)``, with their digests."""

    digests: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    identities: dict[int, int] = field(default_factory=dict)
    """CPU emulation: the storage each listed address was (a storage freed and another
    made at its address and size is not the same allocation)."""

    @classmethod
    def take(cls, runtime: Any) -> PriorRegions:
        found = {}
        for region in regions_of(runtime):
            if region.nbytes >= 16:
                found[(region.address, region.nbytes)] = _digest(region)
        return cls(found, _identities(runtime))

    def same_allocations(self, runtime: Any) -> list[Region]:
        """The listed allocations there now as the same allocation, their bytes not yet
        compared (read in the measured process: the registry's identities)."""
        if not self.digests:
            return []
        now = _identities(runtime) if self.identities else {}
        return [
            region
            for region in regions_of(runtime)
            if (region.address, region.nbytes) in self.digests
            and now.get(region.address) == self.identities.get(region.address)
        ]

    def unchanged_in(self, regions: list[Region]) -> list[tuple[int, int]]:
        """``(address, bytes)`` of those of ``regions`` (``same_allocations``) that still
        hold their bytes (read wherever the search runs: ``search_apart``)."""
        return [
            (r.address, r.nbytes)
            for r in regions
            if _digest(r) == self.digests.get((r.address, r.nbytes))
        ]

    def unchanged(self, runtime: Any) -> list[tuple[int, int]]:
        """``(address, bytes)`` of every listed allocation still there with its bytes."""
        return self.unchanged_in(self.same_allocations(runtime))


__all__ = ["PriorRegions"]
