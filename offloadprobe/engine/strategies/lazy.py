"""``lazy``: the fix, one pinned host buffer per DDP buffer, allocated once and reused.

The first offload allocates each pinned copy; every offload ``copy_``s into it
synchronously, and only then frees the device storage. PyTorch's pinned allocator
rounds each allocation up to a power of two, so the host holds more than the payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from offloadprobe.core.errors import IntegrityError
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies.base import (
    ModelStrategyInfo,
    ddp_buffers,
    free_storage,
    restore_storage,
    restore_zeroed_grads,
)
from offloadprobe.layout.pinned import Alloc, Event


class HostCopies:
    """One host tensor per DDP buffer, created on first use and checked on reuse."""

    def __init__(self, allocate: Any) -> None:
        self._allocate = allocate
        self._copies: dict[int, torch.Tensor] = {}

    def for_buffer(self, key: int, like: torch.Tensor) -> torch.Tensor:
        host = self._copies.get(key)
        if host is None:
            host = self._copies[key] = self._allocate(like)
        elif host.shape != like.shape or host.dtype != like.dtype:
            raise IntegrityError(
                f"host copy {tuple(host.shape)} {host.dtype} no longer matches its DDP buffer "
                f"{tuple(like.shape)} {like.dtype}: the model's buffers were rebuilt"
            )
        return host

    def get(self, key: int) -> torch.Tensor:
        return self._copies[key]

    def values(self) -> list[torch.Tensor]:
        return list(self._copies.values())


class ReusedHostBufferStrategy:
    """Offload into host copies that outlive the cycle; subclasses choose the memory."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.copies = HostCopies(self.allocate)

    def allocate(self, like: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        for buffer in ddp_buffers(models):
            host = self.copies.for_buffer(id(buffer), buffer.param_data)
            host.copy_(buffer.param_data)
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models: list[Any]) -> None:
        for buffer in ddp_buffers(models):
            restore_storage(buffer.param_data)
            buffer.param_data.copy_(self.copies.get(id(buffer)))
            restore_zeroed_grads(buffer)
        self.runtime.synchronize()


class LazyStrategy(ReusedHostBufferStrategy):
    """Pinned (``pin_memory=True``) host copy per buffer, allocated on first offload."""

    def allocate(self, like: torch.Tensor) -> torch.Tensor:
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
