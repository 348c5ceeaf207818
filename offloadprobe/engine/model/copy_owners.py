"""Where the parameters' bytes found on the device hang: the owner of the storage (an
optimizer key, ``grad_data``), the attribute of a live Python object that keeps a tensor
over it, or nothing (``device memory no part owns``): the words of the "not offloaded"
verdict for a copy found by content (``param_copies``)."""

from __future__ import annotations

import gc
from collections.abc import Iterable
from typing import Any

import torch

from offloadprobe.core.roles import Role
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.model.device_regions import regions_of, storage_range
from offloadprobe.engine.model.search_apart import ContentSearch, Kept
from offloadprobe.engine.optimizer.holdings import is_wrapper


def attribute_names(addresses: set[int], labels: dict[int, str] | None = None) -> dict[int, str]:
    """For device storages at ``addresses``: where a live Python object keeps a tensor
    over it: ``stash on a main parameter`` where ``labels`` (``id -> words``) names the
    holder, else ``Pageable.stash``."""
    labels = labels or {}
    names: dict[int, str] = {}
    with torch._C.DisableTorchFunction():
        tensors = [
            o
            for o in gc.get_objects()
            if isinstance(o, torch.Tensor) and not o.is_meta and _address(o) in addresses
        ]
    for tensor in tensors:
        address = _address(tensor)
        if address is None or address in names:
            continue
        for holder in gc.get_referrers(tensor):
            if holder is tensors:
                continue
            name = _attribute(holder, tensor, labels)
            if name is not None:
                names[address] = name
                break
    return names


def _address(tensor: torch.Tensor) -> int | None:
    if is_wrapper(tensor):
        return None  # a DTensor: its inner tensors have the addresses
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage.data_ptr() if storage.nbytes() else None


def _attribute(holder: Any, tensor: Any, labels: dict[int, str], up: bool = True) -> str | None:
    """``holder.attribute`` where ``holder`` (an object, its ``__dict__``, or, ``up``, a
    list one of those keeps) keeps ``tensor``."""
    if isinstance(holder, dict):
        key = next((k for k, v in holder.items() if v is tensor), None)
        for owner in gc.get_referrers(holder):
            if getattr(owner, "__dict__", None) is holder and isinstance(key, str):
                return _held_as(owner, key, labels)
        return f"a dict's {key!r}" if isinstance(key, str) else None
    if isinstance(holder, list) and up:  # ``Type.attr[i]``: the list's holder, one level up
        index = next((i for i, v in enumerate(holder) if v is tensor), None)
        for outer in gc.get_referrers(holder):
            name = _attribute(outer, holder, labels, up=False)
            if name is not None and index is not None:
                return f"{name}[{index}]"
        return None
    attrs = getattr(holder, "__dict__", None)
    if isinstance(attrs, dict):
        attr = next((k for k, v in attrs.items() if v is tensor), None)
        if attr is not None:
            return _held_as(holder, attr, labels)
    return None


def _held_as(holder: Any, attr: str, labels: dict[int, str]) -> str:
    """``stash on a main parameter`` (a holder ``labels`` names), else ``Pageable.stash``."""
    label = labels.get(id(holder))
    return f"{attr} on {label}" if label else f"{type(holder).__name__}.{attr}"


UNNAMED = "device memory no part owns"
MOVED = (Role.PARAMETERS, Role.FROZEN, Role.REFERENCE)
"""Roles whose own storages the search leaves out (theirs by storage, judged by their
own rule)."""


SEARCHED = (Role.GRADIENTS, Role.OPTIMIZER, Role.BATCH, Role.FRAMEWORK)
"""Roles whose storages the search reads (a copy of the parameters there is found)."""


def _owners(model: Any, own: Any) -> dict[int, str]:
    """``{storage address: its owner}`` for what the inventory names in the storages the
    search reads, then what only hangs off the optimizer (``hung``)."""
    holdings = [h for h in inventory_of(model, own) if h.role in SEARCHED]
    hung = getattr(model, "hung", None)
    if hung is not None:
        holdings += hung(own)
    else:
        from offloadprobe.engine.model.inventory import hung as megatron_hung

        holdings += megatron_hung(model, own)
    names: dict[int, str] = {}
    for holding in holdings:
        if holding.role is Role.BATCH:
            name = f"the batch's {holding.key.rsplit('/', 1)[-1]}"
        else:
            name = holding.owner
        names.setdefault(storage_range(holding.tensor)[0], name)
    return names


def _labels(model: Any) -> dict[int, str]:
    """The optimizers' and the model's parameters, by ``id``, in words (a parameter that is
    both, as a plain ``torch.optim`` optimizer holds them, is the model's)."""
    groups = getattr(model, "optimizer_groups", None)
    if groups is None:
        from offloadprobe.engine.model.inventory import optimizer_groups

        found = optimizer_groups(model)
    else:
        found = groups()
    labels = {id(p): "a main parameter" for each in found for g in each for p in g["params"]}
    modules = getattr(model, "modules", None)
    if not isinstance(modules, list):
        modules = model.chunks
    labels.update((id(p), "a model parameter") for m in modules for p in m.parameters())
    return labels


def copies_on_device(
    model: Any,
    runtime: Any,
    search: ContentSearch,
    *,
    own: Any = None,
    exclude: Iterable[tuple[int, int]] = (),
    kept: Kept = None,
) -> dict[str, int]:
    """After an offload: bytes of the parameters found on the device outside their own
    storages and the parts', by where they hang (the owner of the storage, the attribute
    that keeps it, or ``device memory no part owns``). ``exclude``: storages a strategy
    released through the driver (their addresses need not be mapped); ``kept()``: the
    allocations before the build still unchanged (``prior_regions``)."""
    skip = [storage_range(h.tensor) for h in inventory_of(model) if h.role in MOVED]
    found = search.find(regions_of(runtime), [*skip, *exclude], kept)
    if not found:
        return {}
    names = _owners(model, own)
    names.update(attribute_names(set(found) - names.keys(), _labels(model)))
    by_where: dict[str, int] = {}
    for address, nbytes in found.items():
        where = names.get(address, UNNAMED)
        by_where[where] = by_where.get(where, 0) + nbytes
    return by_where
