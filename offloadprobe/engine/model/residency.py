"""Which bytes of the probe model are resident on its device right now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from offloadprobe.engine.optimizer.holdings import holdings
from offloadprobe.engine.runtime import emulation
from offloadprobe.engine.strategies.base import ddp_buffers


def device_tensors(model: Any) -> Iterator[torch.Tensor]:
    """DDP param/grad buffers and every device tensor the optimizer holds."""
    for buffer in ddp_buffers(model.chunks):
        yield buffer.param_data
        yield buffer.grad_data
    yield from (h.tensor for h in holdings([model.optimizer]) if not h.host_by_design)


def device_bytes(model: Any) -> int:
    """Allocated bytes of distinct storages among ``device_tensors`` (freed ones count 0).

    In CPU emulation, tensors a strategy made in host memory (a ``.to("cpu")`` copy
    stored back into the optimizer state) are host bytes, not device bytes.
    """
    seen: dict[int, int] = {}
    for tensor in device_tensors(model):
        if emulation.is_host_copy(tensor):
            continue
        storage = tensor.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
