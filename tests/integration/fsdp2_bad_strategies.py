"""FSDP2 strategies written to fool a gate, for tests/integration/test_fsdp2_cli_cpu.py:
each moves the model as ``exact`` does, then does one wrong thing. The truth is their own
doing (one shard's value changed; one shard's storage kept on the device), never a figure
read from the record under test.

``load(model, device_id)`` on ``DeviceIdLoad`` is verl's ``load_fsdp_optimizer`` shape:
offloadprobe must pass it the load's device.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engines.fsdp2.strategies.common import fsdp_params, local_tensor
from offloadprobe.engines.fsdp2.strategies.exact import ExactPinned, device_storages, model_tensors


def _largest(model: Any) -> Any:
    return max(fsdp_params(model), key=lambda p: p._sharded_param_data.numel())


class CorruptsOneShard(ExactPinned):
    """An honest round trip, then one element of the largest shard changed on load."""

    def load(self, model: Any) -> None:
        import torch

        super().load(model)
        with torch.no_grad():
            local_tensor(_largest(model).sharded_param).view(-1)[3] += 1.0


class LeavesOneShard(ExactPinned):
    """Moves every storage but the largest shard's, which stays on the device."""

    def offload(self, model: Any) -> None:
        import torch

        kept = _largest(model)._sharded_param_data.untyped_storage()._cdata
        with torch.no_grad():
            for param in model.parameters():
                param.grad = None
            storages = device_storages(model_tensors(model), self.runtime)
            self.arena.offload([s for s in storages if s._cdata != kept], self._sync)


class DeviceIdLoad:
    """An optimizer pair of verl's shape: ``offload(optimizer)``, ``load(optimizer,
    device_id)``; every AdamW state tensor to the host and back by ``.to``."""

    def __init__(self, runtime: Any = None) -> None:
        self.devices: list[Any] = []

    def offload(self, optimizer: Any) -> None:
        import torch

        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to("cpu")

    def load(self, optimizer: Any, device_id: Any) -> None:
        import torch

        self.devices.append(device_id)
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to(device_id)
