"""Every tensor an FSDP2 training state owns, named by owner (``core.roles.Holding``).

Read from FSDP2's own objects each time (torch 2.11 to 2.13, ``fsdp/_fully_shard``), so a
strategy that replaces a shard (``model.to``, ``reset_sharded_param``) is seen as it left
it. Per ``FSDPParam`` (one per parameter):

- ``sharded_param`` (PARAMETERS): the fp32 DTensor's local shard. Its storage is the
  padded shard (``_sharded_param_data``, the first chunk's rows); where a strategy left
  that storage apart from the local tensor's, it is named too (``sharded_param_data``).
- ``sharded_grad`` (GRADIENTS): the gradient DTensor's local shard, a view into its param
  group's flat fp32 reduce-scatter output (one storage per ``fully_shard``, padding
  included): the holdings of one group share it.
- ``unsharded_param`` (FRAMEWORK): the bf16 all-gather output the unsharded parameter is
  a view of; its storage is resized to 0 at reshard and is held after a forward where
  FSDP2 does not reshard (the root's parameters, ``reshard_after_forward=False``).
- ``unsharded_grad`` (GRADIENTS, only when a backward did not reduce) and
  ``sharded_post_forward_param`` (FRAMEWORK, only when resharding to a smaller mesh).

Per ``FSDPParamGroup`` and the communication state they share (FRAMEWORK): the group's
empty all-gather output, an all-gather result pending or kept for the next copy-in
(``all_gather_output``, ``all_gather_state``), reduce-scatter inputs kept alive
(``reduce_scatter_input``), HSDP's partial and all-reduce buffers.

AdamW (OPTIMIZER): ``exp_avg``, ``exp_avg_sq`` (DTensors: their local shards, unpadded)
and ``step`` (a host scalar unless ``capturable`` or ``fused``). Module buffers
(FRAMEWORK) and the batch (BATCH). Keys: ``<parameter name>/<owner>`` for parameters,
``<module name or "root">/<owner>[/<i>]`` for groups: stable across a round trip.

Several holdings may share one storage (a group's gradients): count bytes by storage
(:func:`storage_bytes`), never by holding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from offloadprobe.core.roles import Holding, Role
from offloadprobe.engines.fsdp2.strategies.common import param_groups


def local(tensor: Any) -> Any:
    """A DTensor's local shard; any other tensor itself."""
    while hasattr(tensor, "_local_tensor"):
        tensor = tensor._local_tensor
    return tensor


def fsdp_groups(model: nn.Module) -> Iterator[tuple[str, Any]]:
    """(module name, ``FSDPParamGroup``) of every ``fully_shard`` in ``model``, root first
    (named ``root``)."""
    for name, module in model.named_modules():
        get = getattr(module, "_get_fsdp_state", None)
        if get is None:
            continue
        for group in param_groups(module):
            yield name or "root", group


def _param_name(model: nn.Module, fsdp_param: Any, names: dict[int, str]) -> str:
    info = fsdp_param._module_info
    prefix = names[id(info.module)]
    return f"{prefix}.{info.param_name}" if prefix else info.param_name


def parameter_names(model: nn.Module) -> dict[int, str]:
    """``id(sharded parameter) -> its name``, for every FSDP2-managed parameter."""
    names = {id(m): n for n, m in model.named_modules()}
    return {
        id(p.sharded_param): _param_name(model, p, names)
        for _, group in fsdp_groups(model)
        for p in group.fsdp_params
    }


def _param_holdings(model: nn.Module) -> Iterator[Holding]:
    names = {id(m): n for n, m in model.named_modules()}
    for _, group in fsdp_groups(model):
        for p in group.fsdp_params:
            name = _param_name(model, p, names)
            shard = local(p.sharded_param)
            yield Holding("sharded_param", Role.PARAMETERS, f"{name}/sharded_param", shard)
            data = p._sharded_param_data
            if _storage(data) != _storage(shard):
                yield Holding(
                    "sharded_param_data", Role.FRAMEWORK, f"{name}/sharded_param_data", data
                )
            grad = p.sharded_param.grad
            if grad is not None:
                yield Holding("sharded_grad", Role.GRADIENTS, f"{name}/sharded_grad", local(grad))
            for i, output in enumerate(p.all_gather_outputs):
                key = f"{name}/unsharded_param" + (f"/{i}" if i else "")
                yield Holding("unsharded_param", Role.FRAMEWORK, key, output)
            extra = (
                ("unsharded_grad", Role.GRADIENTS, p.unsharded_accumulated_grad),
                (
                    "sharded_post_forward_param",
                    Role.FRAMEWORK,
                    getattr(p, "_sharded_post_forward_param_data", None),
                ),
            )
            for owner, role, tensor in extra:
                if tensor is not None:
                    yield Holding(owner, role, f"{name}/{owner}", local(tensor))


def _group_holdings(model: nn.Module) -> Iterator[Holding]:
    """FSDP2's own buffers of each group, read by attribute where this torch has it (2.11
    and 2.13 differ in which they keep): never assumed absent where present."""
    contexts: dict[int, Any] = {}
    for name, group in fsdp_groups(model):
        empty = getattr(group, "_all_gather_output", None)
        if isinstance(empty, torch.Tensor):
            yield Holding(
                "all_gather_output", Role.FRAMEWORK, f"{name}/empty_all_gather_output", empty
            )
        result = getattr(group, "_all_gather_result", None)
        if result is not None:
            yield Holding(
                "all_gather_output",
                Role.FRAMEWORK,
                f"{name}/all_gather_output",
                result.all_gather_output,
            )
        partial = getattr(group, "_partial_reduce_output", None)
        if partial is not None:
            yield Holding(
                "partial_reduce_output", Role.FRAMEWORK, f"{name}/partial_reduce_output", partial
            )
        reduce_state = getattr(group, "_all_reduce_state", None)
        if reduce_state is not None:
            yield Holding(
                "all_reduce_input",
                Role.FRAMEWORK,
                f"{name}/all_reduce_input",
                reduce_state.all_reduce_input,
            )
        contexts.setdefault(id(group.comm_ctx), group.comm_ctx)
    for n, ctx in enumerate(contexts.values()):
        prefix = "comm" + (f"{n}" if n else "")
        state = getattr(ctx, "all_gather_state", None)
        if state is not None:
            yield Holding(
                "all_gather_state",
                Role.FRAMEWORK,
                f"{prefix}/all_gather_state",
                state.all_gather_result.all_gather_output,
            )
        for i, rs in enumerate(getattr(ctx, "reduce_scatter_states", ())):
            yield Holding(
                "reduce_scatter_input",
                Role.FRAMEWORK,
                f"{prefix}/reduce_scatter_input/{i}",
                rs.reduce_scatter_input,
            )


def _optimizer_holdings(model: nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[Holding]:
    names = parameter_names(model)
    for group in optimizer.param_groups:
        for param in group["params"]:
            name = names.get(id(param))
            if name is None:
                raise ValueError("the optimizer holds a parameter FSDP2 does not manage")
            for owner, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    yield Holding(owner, Role.OPTIMIZER, f"{name}/{owner}", local(value))


def inventory(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]
) -> list[Holding]:
    """Every tensor of the training state, each once (see the module's docstring)."""
    found = [*_param_holdings(model), *_group_holdings(model)]
    found += _optimizer_holdings(model, optimizer)
    found += [
        Holding("buffer", Role.FRAMEWORK, f"{name}/buffer", local(b))
        for name, b in model.named_buffers()
    ]
    found += [Holding("batch", Role.BATCH, f"batch/{i}", t) for i, t in enumerate(batch)]
    keys = [h.key for h in found]
    if len(set(keys)) != len(keys):
        raise AssertionError(
            f"inventory keys repeat: {sorted(k for k in keys if keys.count(k) > 1)}"
        )
    return found


def _storage(tensor: torch.Tensor) -> Any:
    return tensor.untyped_storage()._cdata


def storage_bytes(
    holdings: list[Holding], where: Callable[[torch.Tensor], bool] = lambda t: True
) -> int:
    """Bytes of the distinct storages the holdings name (each counted once, whatever
    shares it), of those tensors ``where`` accepts (where they are on the device, say)."""
    seen: dict[int, int] = {}
    for h in holdings:
        if where(h.tensor):
            storage = h.tensor.untyped_storage()
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())
