"""Which bytes of the probe model are resident on its device right now, by fact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from offloadprobe.engine.model import parts
from offloadprobe.engine.model.buffers import ddp_buffers
from offloadprobe.engine.optimizer.holdings import holdings
from offloadprobe.engine.runtime import emulation


def device_tensors(model: Any) -> Iterator[torch.Tensor]:
    """DDP param/grad buffers, the parameters outside them, every optimizer tensor."""
    for buffer in ddp_buffers(model.chunks):
        yield buffer.param_data
        yield buffer.grad_data
    yield from (p for *_, p in parts.named(model))
    yield from (h.tensor for h in holdings([model.optimizer]))


def device_bytes(model: Any) -> int:
    """Allocated bytes of distinct device storages among ``device_tensors``.

    A storage is on the device when its bytes are: ``is_cuda`` on a GPU, the emulated
    device's registry in CPU emulation; who references it does not matter.
    """
    seen: dict[int, int] = {}
    for tensor in device_tensors(model):
        if emulation.on_device(tensor):
            storage = tensor.untyped_storage()
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())
