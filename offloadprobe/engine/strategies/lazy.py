"""``lazy``: the fix, one pinned host buffer per DDP buffer, allocated once and reused.

The first offload allocates each pinned copy; every offload ``copy_``s into it
synchronously, and only then frees the device storage. PyTorch's pinned allocator
rounds each allocation up to a power of two, so the host holds more than the payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.host_copies import ReusedHostBuffers
from offloadprobe.layout.pinned import Alloc, Event


class LazyStrategy(ReusedHostBuffers):
    """Pinned (``pin_memory=True``) host copy per buffer, allocated on first offload."""

    def allocate(self, like: Any) -> Any:
        import torch

        return torch.empty(
            like.shape, dtype=like.dtype, device="cpu", pin_memory=self.runtime.can_pin
        )


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """One pinned host copy per buffer on the first offload, reused afterwards."""
    return [
        Alloc(name=f"{name} host copy", nbytes=n, kind="pinned")
        for name, n in zip(labels, payloads, strict=True)
    ]


STRATEGY = ModelStrategyInfo(
    name="lazy",
    summary="one pinned host buffer per DDP buffer, reused (the fix)",
    factory=LazyStrategy,
    host_events=host_events,
    emulation="the pinned buffer is an ordinary host buffer of exact size",
)
