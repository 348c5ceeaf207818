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
        pass

    def offload(self, optimizer: Any) -> None:
        import torch

        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to("cpu")

    def load(self, optimizer: Any, device_id: Any) -> None:
        import torch

        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to(device_id)


# -- written to fool a gate, found by an adversarial review (2026-12-04): each read "ok"
#    or crashed the tool before the fixes it is named after


def _first_group(model: Any) -> Any:
    from torch.distributed.fsdp import FSDPModule

    from offloadprobe.engines.fsdp2.strategies.common import param_groups

    return next(g for m in model.modules() if isinstance(m, FSDPModule) for g in param_groups(m))


class ParksMomentsInFrameworkSlot:
    """Optimizer state "offloaded": host copies in the state, and one device copy of every
    moment parked in an FSDP2 group's ``_partial_reduce_output`` (a FRAMEWORK holding),
    loaded back from there. Needs the model: found through the optimizer's parameters'
    module, here the one ``ParksMomentsInFrameworkSlot.model`` the model strategy sets."""

    model: Any = None

    def __init__(self, runtime: Any = None) -> None:
        self.keys: list[tuple[Any, str, Any, int]] = []

    def offload(self, optimizer: Any) -> None:
        import torch

        parts, self.keys = [], []
        for param, state in optimizer.state.items():
            for key in ("exp_avg", "exp_avg_sq"):
                shard = local_tensor(state[key])
                parts.append(shard.reshape(-1))
                self.keys.append((param, key, shard.shape, shard.numel()))
                state[key]._local_tensor = shard.to("cpu")
        self.group = _first_group(ParksMomentsInFrameworkSlot.model)
        self.group._partial_reduce_output = torch.cat(parts)  # made now, on the device

    def load(self, optimizer: Any) -> None:
        stash, at = self.group._partial_reduce_output, 0
        for param, key, shape, n in self.keys:
            optimizer.state[param][key]._local_tensor = stash[at : at + n].clone().view(shape)
            at += n
        self.group._partial_reduce_output = None


class ExactTellsTheModel(ExactPinned):
    """``exact``, which also hands the model to ``ParksMomentsInFrameworkSlot``."""

    def offload(self, model: Any) -> None:
        ParksMomentsInFrameworkSlot.model = model
        super().offload(model)


class LeavesGradients(ExactPinned):
    """``exact``'s offload without freeing the gradients (one flat storage per
    ``fully_shard``: each gradient a view into it)."""

    def offload(self, model: Any) -> None:
        import torch

        from offloadprobe.engines.fsdp2.strategies.common import reshard

        with torch.no_grad():
            reshard(model)
            self.arena.offload(device_storages(model_tensors(model), self.runtime), self._sync)


class LoadsToTheHost(DeviceIdLoad):
    """Moves AdamW's moments to the host; its load, handed a device id, ignores it."""

    def load(self, optimizer: Any, device_id: Any) -> None:
        pass


class KeepsAShardCopy(ExactPinned):
    """``exact``, and a plain device clone of the largest shard kept on the strategy."""

    def offload(self, model: Any) -> None:
        self.kept = local_tensor(_largest(model).sharded_param).detach().clone()
        super().offload(model)


class SplitsTheView(ExactPinned):
    """An honest round trip, then each shard's local tensor moved into a fresh storage
    apart from FSDP2's padded one (``_sharded_param_data``), so AdamW's updates never reach
    what FSDP2 all-gathers for the forward."""

    def load(self, model: Any) -> None:
        import torch

        super().load(model)
        with torch.no_grad():
            p = _largest(model)
            p.sharded_param._local_tensor = local_tensor(p.sharded_param).clone()


class _SameRepr(float):
    """A float whose ``repr`` is another float's."""

    shown = "0.0"

    def __repr__(self) -> str:
        return self.shown


class DoublesLrBehindItsRepr:
    """Moves nothing itself; on load doubles every group's ``lr`` in a float subclass that
    prints the old value (param-group values were compared by ``repr``)."""

    def __init__(self, runtime: Any = None) -> None:
        pass

    def offload(self, optimizer: Any) -> None:
        pass

    def load(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            sneaky = _SameRepr(float(group["lr"]) * 2)
            sneaky.shown = repr(group["lr"])
            group["lr"] = sneaky
