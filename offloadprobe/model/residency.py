"""Which bytes of the probe model are resident on its device right now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from offloadprobe.strategies.base import ddp_buffers


def _optimizer_tensors(optimizer: Any) -> Iterator[torch.Tensor]:
    parts = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    for part in parts:
        inner = getattr(part, "optimizer", None)
        if inner is not None:
            for state in inner.state.values():
                yield from (v for v in state.values() if isinstance(v, torch.Tensor))
        for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
            yield from group


def device_tensors(model: Any) -> Iterator[torch.Tensor]:
    """DDP param/grad buffers and every optimizer-state tensor of the probe model."""
    for buffer in ddp_buffers(model.chunks):
        yield buffer.param_data
        yield buffer.grad_data
    yield from _optimizer_tensors(model.optimizer)


def device_bytes(model: Any) -> int:
    """Allocated bytes of distinct storages among ``device_tensors`` (freed ones count 0)."""
    seen: dict[int, int] = {}
    for tensor in device_tensors(model):
        storage = tensor.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
