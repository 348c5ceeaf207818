"""Every tensor a megatron optimizer holds, named by where it is held.

One walk serves the ``complete`` offload strategy (which must move all of it) and the
residency audit (which must find whatever a strategy left behind): the inner Adam's
state under every key, TE/PrecisionAwareAdam's per-state scales, the DistributedOptimizer's
fp32 groups, and the gradients on the main params. Many of these are views into the DDP
``param_data``/``grad_data`` buffers; :func:`storage_key` lets callers tell them apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FP32_GROUPS = ("shard_fp32_from_float16_groups", "shard_fp32_groups")
"""DistributedOptimizer attributes holding fp32 shards (lists of lists; entries may be None)."""
MAIN_GRAD_ATTRS = ("grad", "decoupled_grad")
"""Where megatron puts a main param's gradient (``decoupled_grad``: precision-aware)."""


@dataclass(frozen=True, slots=True)
class Held:
    """One tensor reachable from the optimizer."""

    owner: str
    """State key (``exp_avg``, ``master_param``, any other), ``<key>.scale``, an fp32 group's
    attribute name, or ``main_param.grad`` / ``main_param.decoupled_grad``."""
    param: torch.Tensor | None
    """The inner optimizer's parameter (or fp32 shard) this tensor belongs to."""
    tensor: torch.Tensor
    host_by_design: bool = False
    """torch keeps it in host memory even on CUDA (a torch optimizer's ``step`` count)."""


def megatron_optimizers(optimizers: Any) -> list[Any]:
    """Flatten ``[ChainedOptimizer | DistributedOptimizer, ...]`` to the megatron optimizers
    that own an inner optimizer (stub sub-optimizers without params are skipped)."""
    items = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
    found = []
    for item in items:
        for part in getattr(item, "chained_optimizers", None) or [item]:
            if getattr(part, "optimizer", None) is not None:
                found.append(part)
    return found


def storage_key(tensor: torch.Tensor) -> int:
    """Identity of the tensor's storage (its StorageImpl): equal for every view of it."""
    return tensor.untyped_storage()._cdata


def is_wrapper(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a wrapper subclass (a DTensor, an FP8 state tensor): its bytes
    are its inner tensors' (``__tensor_flatten__``), each a live tensor of its own."""
    import torch

    if type(tensor) in (torch.Tensor, torch.nn.Parameter):
        return False
    return getattr(tensor, "__tensor_flatten__", None) is not None


def leaves(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors behind ``tensor``: itself, or a wrapper subclass's inner tensors
    (e.g. an FP8 state tensor that implements ``__tensor_flatten__``)."""
    if not is_wrapper(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    inner = (getattr(tensor, name) for name in names)
    return [leaf for t in inner if isinstance(t, torch.Tensor) for leaf in leaves(t)]


def _flat(groups: Any) -> Iterator[torch.Tensor]:
    import torch

    for group in groups or []:
        members = group if isinstance(group, (list, tuple)) else [group]
        yield from (t for t in members if isinstance(t, torch.Tensor))


def _host_step(key: str, group: dict[str, Any] | None) -> bool:
    if key != "step" or group is None:
        return False
    return not (group.get("capturable") or group.get("fused"))


def holdings(optimizers: Any) -> Iterator[Held]:
    """Every tensor every megatron optimizer in ``optimizers`` holds (views included)."""
    import torch

    for part in megatron_optimizers(optimizers):
        inner = part.optimizer
        group_of = {id(p): g for g in inner.param_groups for p in g["params"]}
        for param, state in inner.state.items():
            group = group_of.get(id(param))
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    for leaf in leaves(value):
                        yield Held(key, param, leaf, _host_step(key, group))
        for param, scales in (getattr(inner, "_scales", None) or {}).items():
            for key, scale in scales.items():
                if isinstance(scale, torch.Tensor):
                    yield Held(f"{key}.scale", param, scale)
        for attr in FP32_GROUPS:
            for shard in _flat(getattr(part, attr, None)):
                yield Held(attr, shard, shard)
        for group in inner.param_groups:
            for param in group["params"]:
                for attr in MAIN_GRAD_ATTRS:
                    grad = getattr(param, attr, None)
                    if isinstance(grad, torch.Tensor):
                        yield Held(f"main_param.{attr}", param, grad)


def ddp_buffer_tensors(optimizers: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``("param_data"|"grad_data", tensor)`` of the DDP buffers the optimizers shard."""
    seen: set[int] = set()
    for part in megatron_optimizers(optimizers):
        for buffer in getattr(part, "buffers", None) or []:
            if id(buffer) in seen:
                continue
            seen.add(id(buffer))
            yield "param_data", buffer.param_data
            yield "grad_data", buffer.grad_data


def main_param_names(optimizers: Any, chunks: list[Any]) -> dict[int, str]:
    """``id(main param or fp32 shard) -> model parameter name`` via the optimizer's groups."""
    names = {id(p): _plain_name(n) for c in chunks for n, p in c.named_parameters()}
    pairs = (
        ("shard_fp32_from_float16_groups", "model_float16_groups"),
        ("shard_float16_groups", "model_float16_groups"),
        ("shard_fp32_groups", "model_fp32_groups"),
    )
    found: dict[int, str] = {}
    for part in megatron_optimizers(optimizers):
        for shard_attr, model_attr in pairs:
            shard_groups = getattr(part, shard_attr, None) or []
            model_groups = getattr(part, model_attr, None) or []
            for shards, params in zip(shard_groups, model_groups, strict=False):
                for shard, param in zip(shards, params, strict=False):
                    if shard is not None and id(param) in names:
                        found[id(shard)] = names[id(param)]
    return found


def _plain_name(name: str) -> str:
    while name.startswith("module."):
        name = name.removeprefix("module.")
    return name
