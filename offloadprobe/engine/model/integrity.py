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

from offloadprobe.core.roles import Holding, Role
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.model.buffer_views import view_problems
from offloadprobe.engine.model.buffers import ddp_buffers, nbytes
from offloadprobe.engine.model.fingerprint import FingerprintKey, fingerprint, fingerprints
from offloadprobe.engine.model.finite import nonfinite_counts
from offloadprobe.engine.optimizer.holdings import storage_key
from offloadprobe.engine.runtime import emulation, glibc_malloc

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
    """Everything a round trip must bring back: each parameter holding (megatron: each DDP
    ``param_data``, in buffer order), each optimizer tensor (by name) and each optimizer
    param-group value (by name)."""

    buffers: list[tuple[int, ...]]
    optimizer: list[tuple[HeldName, tuple[int, ...]]] = field(default_factory=list)
    groups: list[tuple[str, Any]] = field(default_factory=list)
    parts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """Each frozen or reference-model parameter, by its key (``part name``)."""
    keys: list[str] = field(default_factory=list)
    """The key of each entry of ``buffers``."""
    on_device: list[str] = field(default_factory=list)
    """Keys of the parameter and optimizer holdings on the device before the offload: each
    must be on the device again after the load (a load that leaves one on the host is no
    round trip, whatever its bytes)."""


def _role(holdings: list[Holding], *roles: Role) -> list[Holding]:
    return [h for h in holdings if h.role in roles]


def fingerprint_buffers(models: list[Any]) -> list[tuple[int, ...]]:
    """Fingerprint of every DDP buffer's ``param_data``, in buffer order."""
    return fingerprints(b.param_data for b in ddp_buffers(models))


def _labels(model: Any) -> dict[str, str]:
    method = getattr(model, "labels", None)
    if method is not None:
        return dict(method())
    from offloadprobe.engine.model.inventory import labels

    return labels(model)


def _restores(model: Any, holding: Holding) -> bool:
    method = getattr(model, "restores", None)
    if method is not None:
        return bool(method(holding))
    from offloadprobe.engine.model.inventory import restores

    return restores(holding)


def _held_name(holding: Holding, labels: dict[str, str]) -> HeldName:
    """``exp_avg`` of ``param 3``: the key less its owner (``param 3/exp_avg``)."""
    suffix = f"/{holding.owner}"
    param = holding.key[: -len(suffix)] if holding.key.endswith(suffix) else holding.key
    return HeldName(owner=holding.owner, param=param, label=labels.get(holding.key, ""))


def _optimizer_tensors(model: Any) -> list[tuple[HeldName, torch.Tensor]]:
    """Optimizer tensors to check, each by its name: those whose storage is a parameter's
    or a gradient's (checked there) and those the engine rebuilds in every step (megatron:
    the gradients on the main params) are left out (see the module doc)."""
    holdings = inventory_of(model)
    model_storages = {storage_key(h.tensor) for h in _role(holdings, *MODEL_ROLES)}
    labels = _labels(model)
    return [
        (_held_name(h, labels), h.tensor)
        for h in _role(holdings, Role.OPTIMIZER)
        if storage_key(h.tensor) not in model_storages and _restores(model, h)
    ]


MODEL_ROLES = (Role.PARAMETERS, Role.GRADIENTS)


def _groups(model: Any) -> list[list[dict[str, Any]]]:
    method = getattr(model, "optimizer_groups", None)
    if method is not None:
        return list(method())
    from offloadprobe.engine.model.inventory import optimizer_groups

    return optimizer_groups(model)


def _group_values(model: Any) -> list[tuple[str, Any]]:
    """Every optimizer param group's entries but its params (``step`` where the optimizer
    counts per group, ``lr``, betas ...): a value, or a tensor's fingerprint."""
    found: list[tuple[str, Any]] = []
    for p, groups in enumerate(_groups(model)):
        for g, group in enumerate(groups):
            for name, value in group.items():
                if name == "params":
                    continue
                label = f"optimizer {p} param group {g} {name!r}"
                if isinstance(value, torch.Tensor):
                    found.append((label, fingerprint(value)))
                else:
                    found.append((label, exact_repr(value)))
    return found


_PLAIN = (bool, int, float, complex, str)


def exact_repr(value: Any) -> str:
    """``repr`` as the builtin type writes it (a subclass cannot hide a changed value
    behind a ``__repr__`` of its own), with the subclass's name where it is one; tuples
    and lists element by element (Adam's betas)."""
    if isinstance(value, tuple | list):
        inner = ", ".join(exact_repr(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    for base in _PLAIN:
        if isinstance(value, base):
            text = base.__repr__(value)
            return text if type(value) is base else f"{text} ({type(value).__qualname__})"
    return repr(value)


@glibc_malloc.device_work  # CPU emulation: its temporaries are device memory on a GPU
def fingerprint_state(model: Any) -> Fingerprints:
    """Fingerprint every parameter holding, every part and every optimizer tensor of the
    model's inventory (before offload)."""
    holdings = inventory_of(model)
    tensors = _optimizer_tensors(model)
    values = fingerprints(t for _, t in tensors)
    params = _role(holdings, Role.PARAMETERS)
    loose = _role(holdings, Role.FROZEN, Role.REFERENCE)
    return Fingerprints(
        buffers=fingerprints(h.tensor for h in params),
        optimizer=[(name, fp) for (name, _), fp in zip(tensors, values, strict=True)],
        groups=_group_values(model),
        parts=[
            (h.key, fp) for h, fp in zip(loose, fingerprints(h.tensor for h in loose), strict=True)
        ],
        keys=[h.key for h in params],
        on_device=[
            h.key
            for h in _role(holdings, Role.PARAMETERS, Role.OPTIMIZER)
            if emulation.on_device(h.tensor)
        ],
    )


def _not_back(holdings: list[Holding], before: Fingerprints, cycle: int) -> list[str]:
    """Holdings on the device before the offload that the load left elsewhere."""
    now = {h.key: h for h in holdings}
    missing = [k for k in before.on_device if k in now and not emulation.on_device(now[k].tensor)]
    if not missing:
        return []
    owners = sorted({now[k].owner for k in missing})
    more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
    return [
        f"cycle {cycle}, {missing[0]}: not on the device after load{more} "
        f"({', '.join(owners)} left in host memory)"
    ]


def _storage_ok(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().size() >= nbytes(tensor)


def _where(holding: Holding) -> str:
    """``buffer 3`` of ``buffer 3/param_data``: the place a parameter and its gradient share."""
    return holding.key.rsplit("/", 1)[0]


def _view_problems(model: Any, cycle: int) -> list[str]:
    method = getattr(model, "view_problems", None)
    if method is not None:
        return list(method(cycle))
    return view_problems(model, cycle)


@glibc_malloc.device_work
def verify_round_trip(
    model: Any, before: Fingerprints, cycle: int, *, grads_zeroed: bool = True
) -> list[str]:
    """Problems found after a load; an empty list means every byte came back.

    ``grads_zeroed``: the strategy freed the gradients, so load must hand them back zeroed
    (where the engine's contract says so: megatron's DDP grad buffers; an engine whose
    next step sets gradients anew, FSDP2's ``zero_grad(set_to_none=True)``, says
    ``grads_zeroed_on_load = False``, and only their storage is checked).
    """
    grads_zeroed = grads_zeroed and getattr(model, "grads_zeroed_on_load", True)
    problems = _view_problems(model, cycle)
    holdings = inventory_of(model)
    problems += _not_back(holdings, before, cycle)
    params = _role(holdings, Role.PARAMETERS)
    grads: dict[str, list[Holding]] = {}
    for grad in _role(holdings, Role.GRADIENTS):
        grads.setdefault(_where(grad), []).append(grad)
    want = dict(zip(before.keys, before.buffers, strict=True)) if before.keys else {}
    if not before.keys:  # fingerprints taken without keys: by order
        want = {h.key: fp for h, fp in zip(params, before.buffers, strict=False)}
    restored = [_storage_ok(h.tensor) for h in params]
    found = iter(fingerprints(h.tensor for h, ok in zip(params, restored, strict=True) if ok))
    for param, ok in zip(params, restored, strict=True):
        where = _where(param)
        label = f"cycle {cycle}, {where} ({param.tensor.dtype})"
        if not ok:
            problems.append(f"{label}: {param.owner} storage was not restored by load")
            grads.pop(where, None)
            continue
        if next(found) != want.get(param.key):
            problems.append(f"{label}: {param.owner} differs from before offload")
        for grad in grads.pop(where, []):
            problems += _grad_problems(grad, label, grads_zeroed)
    for where, rest in grads.items():
        for grad in rest:
            label = f"cycle {cycle}, {where} ({grad.tensor.dtype})"
            problems += _grad_problems(grad, label, grads_zeroed)
    return problems + _verify_optimizer(model, before, cycle) + _verify_parts(model, before, cycle)


def _grad_problems(grad: Holding, label: str, grads_zeroed: bool) -> list[str]:
    if not _storage_ok(grad.tensor):
        return [f"{label}: {grad.owner} storage was not restored by load"]
    if grads_zeroed and bool(grad.tensor.any()):
        return [f"{label}: {grad.owner} is not zero after load"]
    return []


def _verify_parts(model: Any, before: Fingerprints, cycle: int) -> list[str]:
    """Each frozen or reference-model parameter, as the engine holds it now (megatron: read
    from the modules by name): still there, its storage back, its bytes unchanged."""
    loose = _role(inventory_of(model), Role.FROZEN, Role.REFERENCE)
    ok = [_storage_ok(h.tensor) for h in loose]
    found = iter(fingerprints(h.tensor for h, good in zip(loose, ok, strict=True) if good))
    want = dict(before.parts)
    now = {h.key for h in loose}
    problems = [
        f"cycle {cycle}: {label}: no module holds it as a parameter after load"
        for label, _ in before.parts
        if label not in now
    ]
    for holding, good in zip(loose, ok, strict=True):
        if not good:
            problems.append(f"cycle {cycle}: {holding.key}: storage was not restored by load")
        elif next(found) != want.get(holding.key):
            problems.append(f"cycle {cycle}: {holding.key} differs from before offload")
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
