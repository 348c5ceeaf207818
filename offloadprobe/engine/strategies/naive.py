"""``naive``: the pre-fix pattern, a fresh pinned copy of each buffer on every offload.

``param_data.cpu().pin_memory()`` first makes a pageable copy, then a pinned copy
(rounded up by PyTorch's pinned allocator), while the copy from the previous cycle
is still referenced. Only when the new copy replaces it does the old one go, and
PyTorch's pinned cache keeps its pages resident.
"""

from __future__ import annotations

from typing import Any

import torch

from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies.base import (
    ddp_buffers,
    free_storage,
    restore_storage,
    restore_zeroed_grads,
)


class NaiveStrategy:
    """Fresh ``.cpu().pin_memory()`` copy per offload; previous copy kept until replaced."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._copies: dict[int, torch.Tensor] = {}

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        for buffer in ddp_buffers(models):
            self._copies[id(buffer)] = buffer.param_data.cpu().pin_memory()
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models: list[Any]) -> None:
        for buffer in ddp_buffers(models):
            restore_storage(buffer.param_data)
            buffer.param_data.copy_(self._copies[id(buffer)], non_blocking=True)
            restore_zeroed_grads(buffer)
        self.runtime.synchronize()
