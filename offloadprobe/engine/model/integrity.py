"""Bit-for-bit round-trip checks of what the model computes with and of all optimizer state.

Before an offload :func:`fingerprint_state` takes the keyed fingerprint
(:mod:`offloadprobe.engine.model.fingerprint`: non-linear, keyed per run, the same on host
and GPU) of every DDP buffer's ``param_data`` and of every optimizer tensor, and the
values in every optimizer param group. After the load :func:`verify_round_trip` checks:

- every view of each buffer is still at its place (:mod:`.buffer_views`: parameters,
  ``main_grad``, buckets, cached shards, the optimizer's shards), so the bytes
  fingerprinted are the bytes the model computes with and the optimizer updates;
- each ``param_data`` has its fingerprint back; ``grad_data`` is restored (and zero when
  the strategy freed it);
- each optimizer tensor has its fingerprint back, and each param group its values.

Optimizer tensors are all that :func:`holdings` finds (``exp_avg``, ``exp_avg_sq``,
``master_param`` in fp32 or int16 remainders, per-state scales, the DistributedOptimizer's
fp32 main params, torch's ``step`` counts) except two kinds, each for a reason:

- views into the DDP buffers (``shard_fp32_groups`` of fp32 parameters, the main params'
  ``decoupled_grad``): their bytes are the buffers', fingerprinted there, and their place
  is checked with the buffer's views;
- the gradients on the main params (``main_param.grad`` / ``.decoupled_grad``): megatron
  rebuilds them from ``main_grad`` in every step before it reads them
  (``_copy_model_grads_to_main_grads``); what they are rebuilt from, ``grad_data``, is
  checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.engine.model import parts
from offloadprobe.engine.model.buffer_views import view_problems
from offloadprobe.engine.model.buffers import ddp_buffers, nbytes
from offloadprobe.engine.model.fingerprint import FingerprintKey, fingerprint, fingerprints
from offloadprobe.engine.optimizer.holdings import holdings, megatron_optimizers, storage_key

__all__ = [
    "FingerprintKey",
    "Fingerprints",
    "fingerprint",
    "fingerprint_buffers",
    "fingerprint_state",
    "fingerprints",
    "verify_round_trip",
]


@dataclass(frozen=True, slots=True)
class Fingerprints:
    """Everything a round trip must bring back, in a fixed order: each DDP ``param_data``,
    each optimizer tensor (by owner) and each optimizer param-group value (by name)."""

    buffers: list[tuple[int, ...]]
    optimizer: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    groups: list[tuple[str, Any]] = field(default_factory=list)
    parts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """Each parameter outside the DDP buffers (``parts.py``), by ``part name``."""


def fingerprint_buffers(models: list[Any]) -> list[tuple[int, ...]]:
    """Fingerprint of every DDP buffer's ``param_data``, in buffer order."""
    return fingerprints(b.param_data for b in ddp_buffers(models))


def _optimizer_tensors(model: Any) -> list[tuple[str, torch.Tensor]]:
    """Optimizer tensors to check, in holdings order: views into the DDP buffers and the
    gradients on the main params (rebuilt every step) are left out (see the module doc)."""
    ddp = set()
    for buffer in ddp_buffers(model.chunks):
        ddp.add(storage_key(buffer.param_data))
        ddp.add(storage_key(buffer.grad_data))
    found = []
    for held in holdings([model.optimizer]):
        if held.owner.startswith("main_param.") or storage_key(held.tensor) in ddp:
            continue
        found.append((held.owner, held.tensor))
    return found


def _group_values(model: Any) -> list[tuple[str, Any]]:
    """Every inner optimizer param group's entries but its params (``step`` where the
    optimizer counts per group, ``lr``, betas ...): a value, or a tensor's fingerprint."""
    found: list[tuple[str, Any]] = []
    for p, part in enumerate(megatron_optimizers([model.optimizer])):
        for g, group in enumerate(part.optimizer.param_groups):
            for name, value in group.items():
                if name == "params":
                    continue
                label = f"optimizer {p} param group {g} {name!r}"
                if isinstance(value, torch.Tensor):
                    found.append((label, fingerprint(value)))
                else:
                    found.append((label, repr(value)))
    return found


def fingerprint_state(model: Any) -> Fingerprints:
    """Fingerprint every DDP buffer and every optimizer tensor of ``model`` (before offload)."""
    tensors = _optimizer_tensors(model)
    values = fingerprints(t for _, t in tensors)
    loose = parts.named(model)
    return Fingerprints(
        buffers=fingerprint_buffers(model.chunks),
        optimizer=[(owner, fp) for (owner, _), fp in zip(tensors, values, strict=True)],
        groups=_group_values(model),
        parts=[
            (f"{part} {name}", fp)
            for (part, name, _), fp in zip(loose, fingerprints(p for *_, p in loose), strict=True)
        ],
    )


def _storage_ok(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().size() >= nbytes(tensor)


def verify_round_trip(
    model: Any, before: Fingerprints, cycle: int, *, grads_zeroed: bool = True
) -> list[str]:
    """Problems found after a load; an empty list means every byte came back.

    ``grads_zeroed``: the strategy freed ``grad_data``, so load must hand it back zeroed.
    """
    problems = view_problems(model, cycle)
    buffers = list(ddp_buffers(model.chunks))
    restored = [_storage_ok(b.param_data) for b in buffers]
    found = iter(fingerprints(b.param_data for b, ok in zip(buffers, restored, strict=True) if ok))
    for index, (buffer, ok) in enumerate(zip(buffers, restored, strict=True)):
        label = f"cycle {cycle}, buffer {index} ({buffer.param_data.dtype})"
        if not ok:
            problems.append(f"{label}: param_data storage was not restored by load")
            continue
        if index >= len(before.buffers) or next(found) != before.buffers[index]:
            problems.append(f"{label}: param_data differs from before offload")
        if not _storage_ok(buffer.grad_data):
            problems.append(f"{label}: grad_data storage was not restored by load")
        elif grads_zeroed and bool(buffer.grad_data.any()):
            problems.append(f"{label}: grad_data is not zero after load")
    return problems + _verify_optimizer(model, before, cycle) + _verify_parts(model, before, cycle)


def _verify_parts(model: Any, before: Fingerprints, cycle: int) -> list[str]:
    """Each parameter outside the DDP buffers: its storage back, its bytes unchanged."""
    loose = parts.named(model)
    ok = [_storage_ok(p) for *_, p in loose]
    found = iter(fingerprints(p for (*_, p), good in zip(loose, ok, strict=True) if good))
    want = dict(before.parts)
    problems = []
    for (part, name, _), good in zip(loose, ok, strict=True):
        if not good:
            problems.append(f"cycle {cycle}: {part} {name}: storage was not restored by load")
        elif next(found) != want.get(f"{part} {name}"):
            problems.append(f"cycle {cycle}: {part} {name} differs from before offload")
    return problems


def _verify_optimizer(model: Any, before: Fingerprints, cycle: int) -> list[str]:
    after = _optimizer_tensors(model)
    if [o for o, _ in after] != [o for o, _ in before.optimizer]:
        shape = f"{len(before.optimizer)} tensors before, {len(after)} after"
        return [f"cycle {cycle}: the optimizer's state changed shape in the round trip ({shape})"]
    ok = [_storage_ok(tensor) for _, tensor in after]
    found = iter(fingerprints(t for (_, t), good in zip(after, ok, strict=True) if good))
    changed: dict[str, int] = {}
    for (owner, _), good, (_, want) in zip(after, ok, before.optimizer, strict=True):
        if not good:
            owner = f"{owner} (storage not restored)"
        elif next(found) == want:
            continue
        changed[owner] = changed.get(owner, 0) + 1
    problems = [
        f"cycle {cycle}: optimizer {owner} differs from before offload in {n} tensor(s)"
        for owner, n in changed.items()
    ]
    groups = dict(_group_values(model))
    for label, want in before.groups:
        got = groups.get(label, "(gone)")
        if got != want:
            shown = "a tensor changed" if isinstance(want, tuple) else f"{want} -> {got}"
            problems.append(f"cycle {cycle}: {label} changed in the round trip ({shown})")
    return problems
