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
- each optimizer tensor has its fingerprint back, and each param group its values (a
  changed one is said to hold non-finite values where it does: +inf or NaN, by count);
- each parameter outside the DDP buffers (:mod:`.parts`: frozen ones, a reference
  model's), read from the modules as they hold it now, by name, has its fingerprint back:
  a strategy that puts another ``nn.Parameter`` in a module is checked on that one.

Optimizer tensors are matched by name, not by position: ``exp_avg of param 3`` (the state
key, or the holding's kind, and the index of the inner optimizer's parameter it belongs
to, counted over every inner optimizer's param groups). A strategy may rebuild a state
dict with its keys in another order, as ``{k: v.to(...) for k, v in ...}`` over anything
does, and the bytes are still the same; a tensor missing after the load, one that was not
there before, or one whose bytes changed is reported by its name.

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

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.engine.model import parts
from offloadprobe.engine.model.buffer_views import view_problems
from offloadprobe.engine.model.buffers import ddp_buffers, nbytes
from offloadprobe.engine.model.fingerprint import FingerprintKey, fingerprint, fingerprints
from offloadprobe.engine.model.finite import nonfinite_counts
from offloadprobe.engine.optimizer.holdings import (
    holdings,
    main_param_names,
    megatron_optimizers,
    storage_key,
)
from offloadprobe.engine.runtime import glibc_malloc

__all__ = [
    "FingerprintKey",
    "Fingerprints",
    "HeldName",
    "fingerprint",
    "fingerprint_buffers",
    "fingerprint_state",
    "fingerprints",
    "verify_round_trip",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldName:
    """Which optimizer tensor: what it is and whose it is; the same before and after a
    round trip whatever order the state was rebuilt in."""

    owner: str
    """The holding's owner (:class:`~offloadprobe.engine.optimizer.holdings.Held`):
    ``exp_avg``, ``master_param``, ``<key>.scale``, an fp32 group's attribute name."""
    param: str
    """``param 3``: the inner optimizers' parameter it belongs to, in param-group order
    (``#2`` after it where one key holds several tensors); ``tensor 0 outside the param
    groups`` for one whose parameter no param group lists."""
    label: str = ""
    """The model parameter's name, where the optimizer maps it to one (shown, not compared)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.owner, self.param)


@dataclass(frozen=True, slots=True)
class Fingerprints:
    """Everything a round trip must bring back: each DDP ``param_data`` (in buffer order),
    each optimizer tensor (by name) and each optimizer param-group value (by name)."""

    buffers: list[tuple[int, ...]]
    optimizer: list[tuple[HeldName, tuple[int, ...]]] = field(default_factory=list)
    groups: list[tuple[str, Any]] = field(default_factory=list)
    parts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """Each parameter outside the DDP buffers (``parts.py``), by ``part name``."""


def fingerprint_buffers(models: list[Any]) -> list[tuple[int, ...]]:
    """Fingerprint of every DDP buffer's ``param_data``, in buffer order."""
    return fingerprints(b.param_data for b in ddp_buffers(models))


def _param_indices(model: Any) -> dict[int, int]:
    """``id(inner optimizer parameter) -> its index`` over every inner optimizer's groups."""
    found: dict[int, int] = {}
    for part in megatron_optimizers([model.optimizer]):
        for group in part.optimizer.param_groups:
            for param in group["params"]:
                found.setdefault(id(param), len(found))
    return found


def _optimizer_tensors(model: Any) -> list[tuple[HeldName, torch.Tensor]]:
    """Optimizer tensors to check, each by its name: views into the DDP buffers and the
    gradients on the main params (rebuilt every step) are left out (see the module doc)."""
    ddp = set()
    for buffer in ddp_buffers(model.chunks):
        ddp.add(storage_key(buffer.param_data))
        ddp.add(storage_key(buffer.grad_data))
    index = _param_indices(model)
    labels = main_param_names([model.optimizer], model.chunks)
    seen: dict[tuple[str, str], int] = {}
    found = []
    for held in holdings([model.optimizer]):
        if held.owner.startswith("main_param.") or storage_key(held.tensor) in ddp:
            continue
        at = index.get(id(held.param)) if held.param is not None else None
        if at is None:  # no param group lists its parameter: numbered among its owner's
            outside = (held.owner, "outside")
            seen[outside] = seen.get(outside, 0) + 1
            param = f"tensor {seen[outside] - 1} outside the param groups"
        else:
            param = f"param {at}"
        count = seen[(held.owner, param)] = seen.get((held.owner, param), 0) + 1
        if count > 1:  # one state entry of several tensors (a wrapper subclass's leaves)
            param = f"{param} #{count}"
        label = labels.get(id(held.param), "") if held.param is not None else ""
        found.append((HeldName(owner=held.owner, param=param, label=label), held.tensor))
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


@glibc_malloc.device_work  # CPU emulation: its temporaries are device memory on a GPU
def fingerprint_state(model: Any) -> Fingerprints:
    """Fingerprint every DDP buffer and every optimizer tensor of ``model`` (before offload)."""
    tensors = _optimizer_tensors(model)
    values = fingerprints(t for _, t in tensors)
    loose = parts.named(model)
    return Fingerprints(
        buffers=fingerprint_buffers(model.chunks),
        optimizer=[(name, fp) for (name, _), fp in zip(tensors, values, strict=True)],
        groups=_group_values(model),
        parts=[
            (f"{part} {name}", fp)
            for (part, name, _), fp in zip(loose, fingerprints(p for *_, p in loose), strict=True)
        ],
    )


def _storage_ok(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().size() >= nbytes(tensor)


@glibc_malloc.device_work
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
    """Each parameter outside the DDP buffers, as the modules hold it now: still there, its
    storage back, its bytes unchanged."""
    loose = parts.named(model)
    ok = [_storage_ok(p) for *_, p in loose]
    found = iter(fingerprints(p for (*_, p), good in zip(loose, ok, strict=True) if good))
    want = dict(before.parts)
    now = {f"{part} {name}" for part, name, _ in loose}
    problems = [
        f"cycle {cycle}: {label}: no module holds it as a parameter after load"
        for label, _ in before.parts
        if label not in now
    ]
    for (part, name, _), good in zip(loose, ok, strict=True):
        if not good:
            problems.append(f"cycle {cycle}: {part} {name}: storage was not restored by load")
        elif next(found) != want.get(f"{part} {name}"):
            problems.append(f"cycle {cycle}: {part} {name} differs from before offload")
    return problems


def _listed(names: list[HeldName], shown: int = 3) -> str:
    """``param 3 (its model name)``, or ``params 1, 3, 5 and 6 more`` (names of one owner)."""
    if len(names) == 1:
        name = names[0]
        return name.param + (f" ({name.label})" if name.label else "")
    listed = ", ".join(n.param.removeprefix("param ") for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"params {listed}{more}"


def _by_owner(names: Iterable[HeldName]) -> dict[str, str]:
    """``owner -> _listed(its names)``, owners in first-seen order."""
    grouped: dict[str, list[HeldName]] = {}
    for name in names:
        grouped.setdefault(name.owner, []).append(name)
    return {owner: _listed(found) for owner, found in grouped.items()}


def nonfinite_of(
    names: Iterable[HeldName],
    tensors: list[tuple[HeldName, torch.Tensor]] | None = None,
    *,
    model: Any = None,
) -> dict[tuple[str, str], int]:
    """How many +inf, -inf or NaN values each named optimizer tensor holds (those that hold
    any), among ``tensors`` or the optimizer tensors ``model`` holds now. Read only for
    tensors a check found changed: an honest run reads none."""
    if tensors is None:
        tensors = _optimizer_tensors(model)
    wanted = {name.key for name in names}
    chosen = [(name, t) for name, t in tensors if name.key in wanted and _storage_ok(t)]
    counts = nonfinite_counts(t for _, t in chosen)
    return {name.key: n for (name, _), n in zip(chosen, counts, strict=True) if n}


def nonfinite_words(owner: str, found: dict[tuple[str, str], int]) -> str:
    """``; it holds 1 non-finite value (+inf, -inf or NaN)`` for one owner's tensors
    (empty when they hold none)."""
    count = sum(n for (who, _), n in found.items() if who == owner)
    if not count:
        return ""
    value = "value" if count == 1 else "values"
    pronoun = "it holds" if sum(who == owner for who, _ in found) == 1 else "they hold"
    return f"; {pronoun} {count} non-finite {value} (+inf, -inf or NaN)"


def _verify_optimizer(model: Any, before: Fingerprints, cycle: int) -> list[str]:
    """Each optimizer tensor by name: still there, its storage back, its bytes unchanged;
    none there that was not before; then each param group's values."""
    after = _optimizer_tensors(model)
    now = {name.key for name, _ in after}
    expected = {name.key: fp for name, fp in before.optimizer}
    at = f"cycle {cycle}: optimizer"
    missing = _by_owner(name for name, _ in before.optimizer if name.key not in now)
    problems = [f"{at} {owner} of {which} missing after load" for owner, which in missing.items()]
    new = _by_owner(name for name, _ in after if name.key not in expected)
    problems += [
        f"{at} {owner} of {which} appeared in the round trip (not held before offload)"
        for owner, which in new.items()
    ]
    kept = [(name, tensor) for name, tensor in after if name.key in expected]
    readable = [(name, tensor) for name, tensor in kept if _storage_ok(tensor)]
    lost = _by_owner(name for name, tensor in kept if not _storage_ok(tensor))
    problems += [
        f"{at} {owner} of {which}: storage was not restored by load"
        for owner, which in lost.items()
    ]
    values = fingerprints(tensor for _, tensor in readable)
    changed = [
        name for (name, _), fp in zip(readable, values, strict=True) if fp != expected[name.key]
    ]
    counts: dict[str, int] = {}
    for name in changed:
        counts[name.owner] = counts.get(name.owner, 0) + 1
    found = nonfinite_of(changed, readable) if changed else {}
    problems += [
        f"{at} {owner} differs from before offload in {counts[owner]} tensor(s): {which}"
        + nonfinite_words(owner, found)
        for owner, which in _by_owner(changed).items()
    ]
    groups = dict(_group_values(model))
    for label, want in before.groups:
        got = groups.get(label, "(gone)")
        if got != want:
            shown = "a tensor changed" if isinstance(want, tuple) else f"{want} -> {got}"
            problems.append(f"cycle {cycle}: {label} changed in the round trip ({shown})")
    return problems
