"""User optimizer-offload functions with verl's signature, plugged in as module:object.

Written for these tests after the shape of verl's ``offload_megatron_optimizer`` /
``load_megatron_optimizer`` (megatron_utils.py): iterate a ChainedOptimizer's
``chained_optimizers``, swap the fp32 copies with ``.data = .data.to(...)`` and replace
Adam state entries with ``.to(...)`` copies. ``VerlOffload`` moves ``master_param`` as
well (the fix of verl PR 6635); ``VerlOffloadPreFix`` does not.
"""

import torch


def _megatron_optimizers(optimizers):
    for opt in optimizers:
        for part in getattr(opt, "chained_optimizers", None) or [opt]:
            if part.optimizer is not None:  # a stub sub-optimizer has no params here
                yield part


def _move_copy_params(part, device):
    for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
        for param in group:
            if param is not None:
                param.data = param.data.to(device, non_blocking=True)


def _move_state(part, device, keys):
    for state in part.optimizer.state.values():
        for key in keys:
            if key in state:
                state[key] = state[key].to(device, non_blocking=True)


@torch.no_grad()
def offload_megatron_optimizer(optimizers, keys=("exp_avg", "exp_avg_sq", "master_param")):
    for part in _megatron_optimizers(optimizers):
        _move_copy_params(part, "cpu")
        _move_state(part, "cpu", keys)


@torch.no_grad()
def load_megatron_optimizer(optimizers, keys=("exp_avg", "exp_avg_sq", "master_param")):
    device = torch.cuda.current_device()
    for part in _megatron_optimizers(optimizers):
        _move_copy_params(part, device)
        _move_state(part, device, keys)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class VerlOffload:
    """verl after PR 6635: ``exp_avg``, ``exp_avg_sq`` and ``master_param``."""

    def offload(self, optimizers):
        offload_megatron_optimizer(optimizers)

    def load(self, optimizers):
        load_megatron_optimizer(optimizers)


class VerlOffloadPreFix:
    """verl before PR 6635: ``master_param`` is never moved."""

    def offload(self, optimizers):
        offload_megatron_optimizer(optimizers, keys=("exp_avg", "exp_avg_sq"))

    def load(self, optimizers):
        load_megatron_optimizer(optimizers, keys=("exp_avg", "exp_avg_sq"))


class Nothing:
    """An optimizer strategy that moves nothing (so nothing can look cheap)."""

    def offload(self, optimizers):
        pass

    def load(self, optimizers):
        pass
