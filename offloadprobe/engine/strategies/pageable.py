"""``pageable``: exact-size ordinary host copies, reused; no page-locking at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.host_copies import ReusedHostBuffers
from offloadprobe.layout.pinned import Alloc, Event


class PageableStrategy(ReusedHostBuffers):
    """Exact-size pageable host copy per buffer: slowest copies, smallest footprint."""

    def allocate(self, like: Any) -> Any:
        import torch

        return torch.empty(like.shape, dtype=like.dtype, device="cpu")


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """One pageable host copy per buffer on the first offload, reused afterwards."""
    return [
        Alloc(name=f"{name} host copy", nbytes=n, kind="pageable")
        for name, n in zip(labels, payloads, strict=True)
    ]


STRATEGY = ModelStrategyInfo(
    name="pageable",
    summary="exact-size pageable host buffer, reused, no pinning",
    factory=PageableStrategy,
    host_events=host_events,
    emulation="the same as on CUDA: an exact-size host buffer",
)
