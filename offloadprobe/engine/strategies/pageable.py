"""``pageable``: exact-size ordinary host copies, reused; no page-locking at all."""

from __future__ import annotations

import torch

from offloadprobe.engine.strategies.lazy import ReusedHostBufferStrategy


class PageableStrategy(ReusedHostBufferStrategy):
    """Exact-size pageable host copy per buffer: slowest copies, smallest footprint."""

    def allocate(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, device="cpu")
