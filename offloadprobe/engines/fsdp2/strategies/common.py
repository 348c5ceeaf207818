"""What every FSDP2 strategy needs from its runtime, read the same way with or without one.

A strategy is built with the engine's runtime (the harness's ``Runtime``: ``device``,
``emulated``, ``can_pin``, ``synchronize()``, ``empty_cache()``) or with nothing, as a
user's script or the benchmark builds it; each helper here answers for both. Torch is
imported inside the functions: descriptor modules stay importable without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def load_device(runtime: Any | None) -> Any:
    """Where a load sends tensors, as the field's code names it: verl's ``get_device_id()``
    (the current CUDA device's index) on a GPU; ``"cuda"`` in CPU emulation (routed to the
    emulated device); ``"cpu"`` on a plain CPU run, where the device is host memory."""
    import torch

    device = getattr(runtime, "device", None)
    if getattr(runtime, "emulated", False):
        return "cuda"
    if device == "cuda" or (device is None and torch.cuda.is_available()):
        return torch.cuda.current_device()
    return "cpu"


def can_pin(runtime: Any | None) -> bool:
    """Whether page-locked host memory exists here."""
    import torch

    if runtime is not None:
        return bool(getattr(runtime, "can_pin", False))
    return bool(torch.cuda.is_available())


def synchronize(runtime: Any | None) -> None:
    """Wait for queued device work (nothing without a GPU)."""
    import torch

    if runtime is not None:
        runtime.synchronize()
    elif torch.cuda.is_available():
        torch.cuda.synchronize()


def empty_cache(runtime: Any | None) -> None:
    """``torch.cuda.empty_cache()``, the field's call after an offload (nothing without a
    GPU)."""
    import torch

    if runtime is not None:
        runtime.empty_cache()
    elif torch.cuda.is_available():
        torch.cuda.empty_cache()


def fsdp_params(model: Any) -> Iterator[Any]:
    """Every ``FSDPParam`` of every ``fully_shard``'ed module under ``model``, each once, in
    module order: the objects that own a sharded parameter's padded local storage
    (``_sharded_param_data``), which ``sharded_param._local_tensor`` narrows."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        for group in param_groups(module):
            yield from group.fsdp_params


def param_groups(module: Any) -> list[Any]:
    """The ``FSDPParamGroup``s of one ``fully_shard``'ed module: torch 2.13 keeps a list
    (``_fsdp_param_groups``), torch 2.11 one group or None (``_fsdp_param_group``)."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [group] if group is not None else []


def local_tensor(tensor: Any) -> Any:
    """A DTensor's local shard (its storage is the bytes it holds); a tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)


def reshard(model: Any) -> None:
    """Free every unsharded parameter left by a forward, as ``FSDPModule._apply`` does before
    ``model.to``: an offload that copies shards must not leave the all-gathered copies."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
