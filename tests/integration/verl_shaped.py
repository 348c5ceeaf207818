"""Offload functions in the shape of verl's ``megatron_utils`` ones, written for these tests.

Same signatures and the same pattern of calls as verl's functions, not their code:

- ``offload_megatron_model_to_cpu(models)`` / ``load_megatron_model_to_gpu(models,
  load_grad=True)`` take the list of model chunks. The ``_pre6193`` variant makes a fresh
  ``.cpu().pin_memory()`` copy of every buffer on every offload (verl before PR 6193); the
  plain one allocates one pinned buffer per DDP buffer once, checks its shape and dtype on
  reuse and ``copy_``s into it synchronously (after PR 6193).
- ``offload_megatron_optimizer(optimizer)`` / ``load_megatron_optimizer(optimizer)`` take
  ONE optimizer (a ChainedOptimizer or a DistributedOptimizer), not a list: the fp32 copies
  move with ``.data = .data.to(...)``, the Adam state entries are replaced by fresh
  ``.to(..., non_blocking=True)`` copies every cycle. The ``_pre6635`` variant leaves
  ``master_param`` on the device (verl before PR 6635).

Each calls ``gc.collect()`` and ``torch.cuda.empty_cache()`` inside, as verl's do.
"""

import gc

import torch

_PINNED = "_verl_shaped_cpu"


def _buffers(models):
    for chunk in models:
        yield from chunk.buffers
        yield from getattr(chunk, "expert_parallel_buffers", None) or []


def _free(tensor):
    tensor.untyped_storage().resize_(0)


def _fresh_pinned(buffer):
    return buffer.param_data.cpu().pin_memory()


def _reused_pinned(buffer):
    host = getattr(buffer, _PINNED, None)
    if host is None:
        pin = torch.cuda.is_available()
        host = torch.empty(
            buffer.param_data.shape, dtype=buffer.param_data.dtype, device="cpu", pin_memory=pin
        )
        setattr(buffer, _PINNED, host)
    assert host.shape == buffer.param_data.shape and host.dtype == buffer.param_data.dtype
    host.copy_(buffer.param_data, non_blocking=False)
    return host


def _offload_model(models, host_copy):
    for buffer in _buffers(models):
        if buffer.param_data.untyped_storage().nbytes():
            setattr(buffer, _PINNED, host_copy(buffer))
            _free(buffer.param_data)
        if buffer.grad_data.untyped_storage().nbytes():
            _free(buffer.grad_data)
    gc.collect()
    torch.cuda.empty_cache()


@torch.no_grad()
def offload_megatron_model_to_cpu(models):
    _offload_model(models, _reused_pinned)


@torch.no_grad()
def offload_megatron_model_to_cpu_pre6193(models):
    _offload_model(models, _fresh_pinned)


@torch.no_grad()
def load_megatron_model_to_gpu(models, load_grad=True):
    for buffer in _buffers(models):
        param = buffer.param_data
        param.untyped_storage().resize_(param.numel() * param.element_size())
        param.copy_(getattr(buffer, _PINNED), non_blocking=True)
        if load_grad:
            grad = buffer.grad_data
            grad.untyped_storage().resize_(grad.numel() * grad.element_size())
            grad.zero_()
    gc.collect()
    torch.cuda.empty_cache()


def _parts(optimizer):
    """A ChainedOptimizer's DistributedOptimizers, or the one optimizer itself."""
    chained = hasattr(optimizer, "chained_optimizers")
    parts = optimizer.chained_optimizers if chained else [optimizer]
    return [p for p in parts if p.optimizer is not None]  # a stub sub-optimizer has none


def _move(optimizer, device, keys):
    for part in _parts(optimizer):
        for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
            for shard in group:
                if shard is not None:
                    shard.data = shard.data.to(device, non_blocking=True)
        for state in part.optimizer.state.values():
            for key in keys:
                if key in state:
                    state[key] = state[key].to(device, non_blocking=True)
    gc.collect()
    torch.cuda.empty_cache()


POST_6635 = ("exp_avg", "exp_avg_sq", "master_param")
PRE_6635 = ("exp_avg", "exp_avg_sq")


@torch.no_grad()
def offload_megatron_optimizer(optimizer):
    _move(optimizer, "cpu", POST_6635)


@torch.no_grad()
def load_megatron_optimizer(optimizer):
    _move(optimizer, torch.cuda.current_device(), POST_6635)


@torch.no_grad()
def offload_megatron_optimizer_pre6635(optimizer):
    _move(optimizer, "cpu", PRE_6635)


@torch.no_grad()
def load_megatron_optimizer_pre6635(optimizer):
    _move(optimizer, torch.cuda.current_device(), PRE_6635)
