"""megatron-core's inventory: every tensor the probe model holds, once, named by its owner
in megatron's words, its role and a key stable across a round trip.

This is the one walk of megatron's training state (``core.roles``): the residency audit,
the device ledger, the round-trip and reference checks, the content search, transfers and
the checkpoint step read it and nothing else of the model.

- ``param_data`` (parameters) and ``grad_data`` (gradients) of every DDP buffer, dense
  then expert-parallel, in chunk order: ``buffer 3/param_data``;
- the parameters outside the buffers (``parts.py``): ``frozen`` (frozen) and ``ref_model``
  (reference model), by ``part name``;
- every tensor the optimizer holds (``optimizer/holdings.py``: Adam's state by key,
  ``master_param``, per-state scales, the DistributedOptimizer's fp32 groups, the main
  parameters' gradients), optimizer state, by ``param 3/exp_avg`` (the index of the inner
  optimizers' parameter it belongs to over their param groups, ``#2`` after it where one
  key holds several tensors). With an ``OwnState`` (``optimizer/own_state.py``) only what
  the optimizer made itself; a tensor that only hangs off it is no part's;
- the batch (stays on the device by design): ``batch/input_ids``;
- what megatron-core keeps for itself (framework, named so it is not memory no part
  owns): its global memory buffer (``parallel_state``'s scratch tensors, reused across
  steps) and each optimizer's ``_scale_one`` (the loss scale of a bf16 run).

Views of the DDP buffers among the optimizer's tensors (fp32 parameters' shards, a main
parameter's gradient in ``grad_data``) and the main parameters' gradients (megatron
rebuilds them from ``main_grad`` in every step before it reads them) are named apart
(``.../view`` keys, and :func:`restores` says False for the latter): their bytes are the
buffers' or are rebuilt, so the round trip checks them there.

Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.roles import Holding, Role
from offloadprobe.engine.model import parts
from offloadprobe.engine.model.buffers import ddp_buffers
from offloadprobe.engine.optimizer.holdings import (
    holdings,
    main_param_names,
    megatron_optimizers,
    storage_key,
)

PART_ROLES = {parts.FROZEN: Role.FROZEN, parts.REF_MODEL: Role.REFERENCE}
REBUILT = ("main_param.grad", "main_param.decoupled_grad")
"""Optimizer holdings megatron rebuilds in every step before it reads them."""


def _param_indices(model: Any) -> dict[int, int]:
    """``id(inner optimizer parameter) -> its index`` over every inner optimizer's groups."""
    found: dict[int, int] = {}
    for part in megatron_optimizers([model.optimizer]):
        for group in part.optimizer.param_groups:
            for param in group["params"]:
                found.setdefault(id(param), len(found))
    return found


def _optimizer(model: Any, own: Any) -> tuple[list[Holding], dict[str, str]]:
    """The optimizer's holdings, each with its key, and the model parameter's name by key
    (where the DistributedOptimizer's groups say it)."""
    buffers = {
        storage_key(t) for b in ddp_buffers(model.chunks) for t in (b.param_data, b.grad_data)
    }
    index = _param_indices(model)
    names = main_param_names([model.optimizer], model.chunks)
    seen: dict[tuple[str, str, bool], int] = {}
    places: dict[tuple[str, int], int] = {}
    found: list[Holding] = []
    labels: dict[str, str] = {}
    for held in holdings([model.optimizer]):
        pair = (held.owner, id(held.param) if held.param is not None else 0)
        place = (*pair, places.get(pair, 0))
        places[pair] = place[2] + 1
        apart = held.owner in REBUILT or storage_key(held.tensor) in buffers
        at = index.get(id(held.param)) if held.param is not None else None
        if at is None:  # no param group lists its parameter: numbered among its owner's
            outside = (held.owner, "outside", apart)
            seen[outside] = seen.get(outside, 0) + 1
            param = f"tensor {seen[outside] - 1} outside the param groups"
        else:
            param = f"param {at}"
        count = seen[(held.owner, param, apart)] = seen.get((held.owner, param, apart), 0) + 1
        if count > 1:  # one state entry of several tensors (a wrapper subclass's leaves)
            param = f"{param} #{count}"
        if own is not None and not own.is_own(place, held):
            continue
        key = f"{param}/{held.owner}" + ("/view" if apart else "")
        found.append(Holding(held.owner, Role.OPTIMIZER, key, held.tensor))
        label = names.get(id(held.param)) if held.param is not None else None
        if label:
            labels[key] = label
    return found, labels


def inventory(model: Any, own: Any = None) -> list[Holding]:
    """Every tensor ``model`` (a ``ProbeModel``) holds, in the order above."""
    found = []
    for i, buffer in enumerate(ddp_buffers(model.chunks)):
        found.append(
            Holding("param_data", Role.PARAMETERS, f"buffer {i}/param_data", buffer.param_data)
        )
        found.append(
            Holding("grad_data", Role.GRADIENTS, f"buffer {i}/grad_data", buffer.grad_data)
        )
    for part, name, param in parts.named(model):
        found.append(Holding(part, PART_ROLES[part], f"{part} {name}", param))
    found += _optimizer(model, own)[0]
    for key, tensor in getattr(model, "batch", {}).items():
        found.append(Holding("batch", Role.BATCH, f"batch/{key}", tensor))
    return found + _framework(model)


def _framework(model: Any) -> list[Holding]:
    """megatron-core's own device tensors (see the module)."""
    import torch

    found = []
    from megatron.core import parallel_state

    memory = getattr(parallel_state, "_GLOBAL_MEMORY_BUFFER", None)
    for (name, dtype), tensor in (getattr(memory, "buffer", None) or {}).items():
        if isinstance(tensor, torch.Tensor):
            key = f"framework/global memory buffer/{name}/{dtype}"
            found.append(Holding("global memory buffer", Role.FRAMEWORK, key, tensor))
    chain = model.optimizer
    optimizers = [chain, *(getattr(chain, "chained_optimizers", None) or [])]
    for index, optimizer in enumerate(optimizers):
        scale = getattr(optimizer, "_scale_one", None)
        if isinstance(scale, torch.Tensor):
            key = f"framework/optimizer {index}/_scale_one"
            found.append(Holding("_scale_one", Role.FRAMEWORK, key, scale))
    return found


def labels(model: Any) -> dict[str, str]:
    """The model parameter's name of each holding that has one, by key."""
    found = {f"{part} {name}": name for part, name, _ in parts.named(model)}
    found.update(_optimizer(model, None)[1])
    return found


def restores(holding: Holding) -> bool:
    """Whether a round trip must bring the holding's bytes back (see the module)."""
    return holding.owner not in REBUILT


def hung(model: Any, own: Any) -> list[Holding]:
    """Tensors that hang off the optimizer but are not its own (``own``), named so."""
    if own is None:
        return []
    mine = {id(h.tensor) for h in _optimizer(model, own)[0]}
    every = _optimizer(model, None)[0]
    return [
        Holding(f"{h.owner} (hung on the optimizer, not its own)", h.role, h.key, h.tensor)
        for h in every
        if id(h.tensor) not in mine
    ]


def optimizer_groups(model: Any) -> list[list[dict[str, Any]]]:
    """Every inner optimizer's param groups, optimizer by optimizer."""
    return [list(part.optimizer.param_groups) for part in megatron_optimizers([model.optimizer])]
