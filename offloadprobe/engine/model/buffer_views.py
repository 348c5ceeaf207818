"""What the model computes with is what the round trip checked: the DDP buffers' views.

megatron-core's ``_ParamAndGradBuffer`` lays every parameter out in one flat
``param_data`` tensor (and its gradient in ``grad_data``): ``param_index_map[p] = (start,
end, bucket)`` and ``p.data`` is ``param_data[start:end].view(shape)``; each bucket's
``param_data``/``grad_data`` is the slice ``bucket_indices[k]``; a bucket group's cached
shards (its all-gather / reduce-scatter inputs) are equal slices of the bucket; the
DistributedOptimizer's ``shard_float16_groups`` / ``shard_fp32_groups`` (with the
precision-aware optimizer: the very tensors it updates) are slices of the parameters.

A load that restores the bytes into a new tensor (``buffer.param_data = host.cuda()``) or
re-points only some of these views leaves the model reading and the optimizer writing
storage the fingerprint never saw. So after every load each view must share the buffer's
storage at exactly its place; any that does not is a problem line that names the buffer
(or optimizer group) and the first tensor that is off, and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from offloadprobe.engine.model.buffers import ddp_buffers
from offloadprobe.engine.optimizer.holdings import megatron_optimizers, storage_key

OPTIMIZER_SHARDS = (
    ("model_float16_groups", "shard_float16_groups"),
    ("model_fp32_groups", "shard_fp32_groups"),
)
"""DistributedOptimizer (model params, their shards) group pairs: the shards view the params."""
CACHED_SHARDS = (
    ("cached_param_buffer_shard_list", "param_data"),
    ("cached_grad_buffer_shard_list", "grad_data"),
)
"""Bucket-group caches of per-rank shards, and the buffer tensor they slice."""
REPLACEABLE = ("param_data", "grad_data")
"""The buffer tensors a load may wrongly replace (``buffer.param_data = host.cuda()``)."""
View = tuple[str, str, str | None]
"""(what kind of view, which one, why it is off or None)."""


def _plain(name: str) -> str:
    while name.startswith("module."):
        name = name.removeprefix("module.")
    return name


def _names(model: Any) -> dict[int, str]:
    return {id(p): _plain(n) for c in model.chunks for n, p in c.named_parameters()}


def _off(tensor: Any, base: torch.Tensor, start: int, numel: int) -> str | None:
    """Why ``tensor`` is not ``base``'s contiguous elements ``[start, start + numel)``."""
    if not isinstance(tensor, torch.Tensor):
        return f"is {type(tensor).__name__}, not a tensor"
    if storage_key(tensor) != storage_key(base):
        size = tensor.untyped_storage().nbytes()
        freed = " (0 bytes: freed)" if size == 0 else f" ({size} bytes)"
        return "views another storage" + freed
    want = base.storage_offset() + start
    if tensor.storage_offset() != want:
        return f"starts at element {tensor.storage_offset()}, not {want}"
    if tensor.numel() != numel:
        return f"has {tensor.numel()} elements, not {numel}"
    if not tensor.is_contiguous():
        return "is not contiguous"
    return None


def _buffer_views(buffer: Any, names: dict[int, str]) -> Iterator[View]:
    """(what, tensor name, why off or None) for every view of one buffer."""
    data, grad = buffer.param_data, buffer.grad_data
    for param, (start, end, _) in buffer.param_index_map.items():
        name = names.get(id(param), "a parameter")
        if data is not None:
            yield "parameters in param_data", name, _off(param, data, start, end - start)
        main_grad = getattr(param, "main_grad", None)
        if main_grad is not None:
            yield "main_grads in grad_data", name, _off(main_grad, grad, start, end - start)
    indices = getattr(buffer, "bucket_indices", None)
    for k, bucket in enumerate(buffer.buckets):
        start, end = indices[k] if indices else (bucket.offset, None)
        numel = end - start if end is not None else bucket.grad_data.numel()
        if data is not None:
            yield (
                "buckets in param_data",
                f"bucket {k}",
                _off(bucket.param_data, data, start, numel),
            )
        yield "buckets in grad_data", f"bucket {k}", _off(bucket.grad_data, grad, start, numel)


def _starts(model: Any) -> dict[int, tuple[Any, int]]:
    """``id(parameter or bucket) -> (its buffer, its first element there)``, by the layout."""
    found: dict[int, tuple[Any, int]] = {}
    for buffer in ddp_buffers(model.chunks):
        for param, (start, _, _) in buffer.param_index_map.items():
            found[id(param)] = (buffer, start)
        indices = getattr(buffer, "bucket_indices", None)
        for k, bucket in enumerate(buffer.buckets):
            found[id(bucket)] = (buffer, indices[k][0] if indices else bucket.offset)
    return found


def _cached_shards(model: Any, starts: dict[int, tuple[Any, int]]) -> Iterator[View]:
    """Bucket groups' cached all-gather / reduce-scatter shards: equal slices of their
    bucket's place in the buffer."""
    for chunk in model.chunks:
        groups = (getattr(chunk, "bucket_groups", None) or []) + (
            getattr(chunk, "expert_parallel_bucket_groups", None) or []
        )
        for group in groups:
            for attr, kind in CACHED_SHARDS:
                for k, shards in enumerate(getattr(group, attr, None) or []):
                    if not shards or k >= len(group.buckets) or id(group.buckets[k]) not in starts:
                        continue
                    buffer, start = starts[id(group.buckets[k])]
                    for r, shard in enumerate(shards):
                        size = shard.numel()
                        why = _off(shard, getattr(buffer, kind), start + r * size, size)
                        yield f"cached {kind} shards", f"bucket {k} shard {r}", why


def _optimizer_shards(
    model: Any, names: dict[int, str], starts: dict[int, tuple[Any, int]]
) -> Iterator[View]:
    """The DistributedOptimizer's buffers are the model's; its shards of the parameters are
    at the parameter's place in ``param_data`` plus the shard's start."""
    known = {id(b) for b in ddp_buffers(model.chunks)}
    for part in megatron_optimizers([model.optimizer]):
        for k, buffer in enumerate(getattr(part, "buffers", None) or []):
            if id(buffer) not in known:
                yield "optimizer buffers", f"buffer {k}", "is not one of the model's DDP buffers"
        ranges = getattr(part, "_get_model_param_range_map", None)
        for model_attr, shard_attr in OPTIMIZER_SHARDS:
            models = getattr(part, model_attr, None) or []
            for params, shards in zip(models, getattr(part, shard_attr, None) or [], strict=False):
                for param, shard in zip(params, shards, strict=False):
                    if shard is None or ranges is None:
                        continue
                    where = ranges(param)["param"]
                    buffer, start = starts.get(id(param), (None, 0))
                    if buffer is None or buffer.param_data is None:
                        base, start = param, 0  # not in a buffer: a slice of the param itself
                    else:
                        base = buffer.param_data
                    why = _off(shard, base, start + where.start, where.size)
                    yield f"optimizer {shard_attr}", names.get(id(param), "a parameter"), why


def _grouped(label: str, views: Iterator[View]) -> list[str]:
    """One line per kind of view: how many are off of how many, and the first of them. All
    of a buffer's views on another storage: the buffer tensor itself was replaced."""
    seen: dict[str, list[int]] = {}
    first: dict[str, str] = {}
    for what, name, why in views:
        counts = seen.setdefault(what, [0, 0])
        counts[1] += 1
        if why is not None:
            counts[0] += 1
            first.setdefault(what, f"{name} {why}")
    lines = []
    for what, (bad, total) in seen.items():
        if not bad:
            continue
        line = (
            f"{label}: {bad} of {total} {what} are not where the buffer puts them ({first[what]})"
        )
        tensor = what.rsplit(" ", 1)[-1]
        if bad == total and "another storage" in first[what] and tensor in REPLACEABLE:
            line += f" - was buffer.{tensor} replaced by a new tensor in load?"
        lines.append(line)
    return lines


def view_problems(model: Any, cycle: int) -> list[str]:
    """Problem lines for every view of a DDP buffer that is not at its place (none: all are)."""
    problems = []
    with torch._C.DisableTorchFunction():
        names = _names(model)
        for index, buffer in enumerate(ddp_buffers(model.chunks)):
            dtype = buffer.param_data.dtype if buffer.param_data is not None else buffer.param_dtype
            problems += _grouped(
                f"cycle {cycle}, buffer {index} ({dtype})", _buffer_views(buffer, names)
            )
        starts = _starts(model)
        problems += _grouped(f"cycle {cycle}", _cached_shards(model, starts))
        problems += _grouped(f"cycle {cycle}", _optimizer_shards(model, names, starts))
    return problems
