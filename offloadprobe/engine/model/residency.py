"""Which bytes of the probe model are resident on its device right now, by fact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from offloadprobe.core.roles import Role
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.runtime import emulation

STAYS = (Role.BATCH, Role.FRAMEWORK)


def device_tensors(model: Any) -> Iterator[torch.Tensor]:
    """Every tensor of the model's inventory but what stays by design (the batch, what
    the engine names its framework's): parameters, gradients, the parts, optimizer state."""
    yield from (h.tensor for h in inventory_of(model) if h.role not in STAYS)


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
