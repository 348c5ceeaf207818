"""``naive``: the pre-fix pattern, a fresh pinned copy of each buffer on every offload.

``param_data.cpu().pin_memory()`` first makes a pageable copy, then a pinned copy
(rounded up by PyTorch's pinned allocator), while the copy from the previous cycle
is still referenced. Only when the new copy replaces it does the old one go, and
PyTorch's pinned cache keeps its pages resident.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.model.buffers import (
    free_storage,
    loose_to_load,
    loose_to_offload,
    restore_storage,
    restore_zeroed_grads,
    to_load,
    to_offload,
)
from offloadprobe.engine.optimizer.holdings import storage_key
from offloadprobe.layout.pinned import Alloc, Event, Free

if TYPE_CHECKING:
    import torch

    from offloadprobe.engine.runtime import Runtime


class NaiveStrategy:
    """Fresh ``.cpu().pin_memory()`` copy per offload; previous copy kept until replaced."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._copies: dict[int, torch.Tensor] = {}

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        for buffer in to_offload(models):
            self._copies[id(buffer)] = buffer.param_data.cpu().pin_memory()
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)
        for param in loose_to_offload(models):
            self._copies[storage_key(param)] = param.detach().cpu().pin_memory()
            free_storage(param)

    def load(self, models: list[Any]) -> None:
        for buffer in to_load(models):
            restore_storage(buffer.param_data)
            buffer.param_data.copy_(self._copies[id(buffer)], non_blocking=True)
            restore_zeroed_grads(buffer)
        for param in loose_to_load(models):
            restore_storage(param)
            param.detach().copy_(self._copies[storage_key(param)], non_blocking=True)
        self.runtime.synchronize()


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """``.cpu()`` makes a pageable temporary, ``.pin_memory()`` a pinned copy; the temporary
    dies when the expression ends, and only then does the assignment drop the previous
    cycle's pinned copy (its block goes to the pinned cache)."""
    events: list[Event] = []
    for c in range(cycles):
        for name, n in zip(labels, payloads, strict=True):
            events += [
                Alloc(name=f"{name} .cpu() pageable temporary", nbytes=n, kind="pageable"),
                Alloc(name=f"{name} pinned copy, cycle {c}", nbytes=n),
                Free(name=f"{name} .cpu() pageable temporary"),
            ]
            if c:
                events.append(Free(name=f"{name} pinned copy, cycle {c - 1}"))
    return events


STRATEGY = ModelStrategyInfo(
    name="naive",
    summary="fresh .cpu().pin_memory() copy every offload (pre-fix)",
    factory=NaiveStrategy,
    host_events=host_events,
    emulation="`.pin_memory()` makes a second ordinary host copy",
)
