"""A user optimizer strategy (verl's signature: functions over ``optimizers``) that moves
every optimizer tensor bit for bit but rebuilds each Adam state dict with its keys in
reverse order, as ``{k: v.to(...) for k, v in reversed(list(state.items()))}`` does.

The fp32 main params move the way verl moves them (``.data = .data.to(...)``), so the
whole optimizer leaves the device; the load keeps the order the offload made. Nothing is
lost or changed: only the order in which the state lists its tensors.
"""

import torch


def _megatron_optimizers(optimizers):
    for opt in optimizers:
        for part in getattr(opt, "chained_optimizers", None) or [opt]:
            if getattr(part, "optimizer", None) is not None:
                yield part


def _move(value, device):
    return value.to(device, copy=True) if isinstance(value, torch.Tensor) else value


@torch.no_grad()
def offload_reversed(optimizers):
    for part in _megatron_optimizers(optimizers):
        for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
            for param in group:
                if param is not None:
                    param.data = param.data.to("cpu", copy=True)
        inner = part.optimizer
        for param, state in list(inner.state.items()):
            inner.state[param] = {k: _move(v, "cpu") for k, v in reversed(list(state.items()))}


@torch.no_grad()
def load_as_offloaded(optimizers):
    for part in _megatron_optimizers(optimizers):
        for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
            for param in group:
                if param is not None:
                    param.data = param.data.to("cuda")
        inner = part.optimizer
        for param, state in list(inner.state.items()):
            inner.state[param] = {k: _move(v, "cuda") for k, v in state.items()}
