"""Offload functions in the shape of verl's ``megatron_utils`` ones, written for these tests.

Same signatures and the same pattern of calls as verl's functions, not their code:

- ``offload_megatron_model_to_cpu(models)`` / ``load_megatron_model_to_gpu(models,
  load_grad=True, load_frozen_params=True)`` take the list of model chunks and branch on
  each. A DDP-wrapped chunk: its dense and expert-parallel buffers, and the frozen
  parameters of its module (outside the buffers; those not on the host move with
  ``param.data = param.data.to("cpu", non_blocking=True)`` and back). Any other chunk (a
  reference model): every named parameter and its grad move with ``.to("cpu")``, the old
  storage freed with ``resize_(0)`` where the tensor owns all of it, and back with
  ``.to(device, non_blocking=True)``.
- A buffer's offload copies ``param_data`` only while it holds its storage, and records
  the sizes it frees; the load restores ``param_data`` only where the storage is empty,
  and ``grad_data`` only where an offload recorded a size. So a second offload, or a load
  without an offload, moves no DDP buffer. The ``.to`` moves are no-ops where the tensor
  already is, as ``Tensor.to`` is, except that the reference model's second offload still
  frees what ``.to("cpu")`` handed back: its host copy (verl's functions do the same).
- The ``_pre6193`` variant makes a fresh ``.cpu().pin_memory()`` copy of every buffer on
  every offload (verl before PR 6193); the plain one allocates one pinned buffer per DDP
  buffer once, checks its shape and dtype on reuse and ``copy_``s into it synchronously
  (after PR 6193).
- ``offload_megatron_optimizer(optimizer)`` / ``load_megatron_optimizer(optimizer)`` take
  ONE optimizer (a ChainedOptimizer or a DistributedOptimizer), not a list: the fp32 copies
  move with ``.data = .data.to(...)``, the Adam state entries are replaced by fresh
  ``.to(..., non_blocking=True)`` copies every cycle (a second call moves nothing: each
  ``.to`` finds its tensor where it is asked to be). The ``_pre6635`` variant leaves
  ``master_param`` on the device (verl before PR 6635).

The device is ``torch.cuda.current_device()`` (CPU emulation answers it, and places
``.to`` moves on its emulated device). Each calls ``gc.collect()`` and
``torch.cuda.empty_cache()`` inside, as verl's do.
"""

import gc

import torch

_PINNED = "_verl_shaped_cpu"
_PARAM_BYTES = "_verl_shaped_param_bytes"
_GRAD_BYTES = "_verl_shaped_grad_bytes"


def _is_ddp(chunk):
    from megatron.core.distributed import DistributedDataParallel

    return isinstance(chunk, DistributedDataParallel)


def _ddp_buffers(chunk):
    yield from chunk.buffers
    yield from getattr(chunk, "expert_parallel_buffers", None) or []


def _held(tensor):
    return tensor.untyped_storage().nbytes()


def _fresh_pinned(buffer):
    return buffer.param_data.cpu().pin_memory()


def _reused_pinned(buffer):
    host = getattr(buffer, _PINNED, None)
    if host is None:
        pin = torch.cuda.is_available()
        host = torch.empty(
            buffer.param_data.shape, dtype=buffer.param_data.dtype, device="cpu", pin_memory=pin
        )
    assert host.shape == buffer.param_data.shape and host.dtype == buffer.param_data.dtype
    host.copy_(buffer.param_data, non_blocking=False)
    return host


def _offload_buffer(buffer, host_copy):
    param, grad = buffer.param_data, buffer.grad_data
    if _held(param):
        setattr(buffer, _PINNED, host_copy(buffer))
        setattr(buffer, _PARAM_BYTES, _held(param))
        param.untyped_storage().resize_(0)
    assert getattr(buffer, _PARAM_BYTES) == _held(getattr(buffer, _PINNED))
    if _held(grad):  # an empty grad storage is taken as offloaded already
        setattr(buffer, _GRAD_BYTES, _held(grad))
        grad.untyped_storage().resize_(0)


def _load_buffer(buffer, load_grad):
    grad, param = buffer.grad_data, buffer.param_data
    recorded = getattr(buffer, _GRAD_BYTES, None)
    if load_grad and recorded is not None:
        if _held(grad) in (0, recorded):
            grad.untyped_storage().resize_(recorded)
        grad.zero_()
    if not _held(param):
        param.untyped_storage().resize_(getattr(buffer, _PARAM_BYTES))
        param.copy_(getattr(buffer, _PINNED), non_blocking=True)


def _owns_its_storage(tensor):
    """Whether freeing the storage frees this tensor's bytes and nobody else's."""
    return (
        _held(tensor) == tensor.numel() * tensor.element_size()
        and tensor.storage_offset() == 0
        and tensor.is_contiguous()
    )


def _to_host_freeing(tensor):
    host = tensor.to("cpu")
    if _owns_its_storage(tensor):
        tensor.untyped_storage().resize_(0)
    return host


def _offload_model(models, host_copy):
    for chunk in models:
        if _is_ddp(chunk):
            for buffer in _ddp_buffers(chunk):
                _offload_buffer(buffer, host_copy)
            for param in chunk.module.parameters():  # frozen: outside the DDP buffers
                if not param.requires_grad and param.device.type != "cpu":
                    param.data = param.data.to("cpu", non_blocking=True)
        else:  # a reference model, not wrapped
            for _, param in chunk.named_parameters():
                param.data = _to_host_freeing(param.data)
                if param.grad is not None:
                    param.grad = _to_host_freeing(param.grad)
    gc.collect()
    torch.cuda.empty_cache()


@torch.no_grad()
def offload_megatron_model_to_cpu(models):
    _offload_model(models, _reused_pinned)


@torch.no_grad()
def offload_megatron_model_to_cpu_pre6193(models):
    _offload_model(models, _fresh_pinned)


@torch.no_grad()
def load_megatron_model_to_gpu(models, load_grad=True, load_frozen_params=True):
    device = torch.cuda.current_device()
    for chunk in models:
        if _is_ddp(chunk):
            for buffer in _ddp_buffers(chunk):
                _load_buffer(buffer, load_grad)
            if load_frozen_params:
                for param in chunk.module.parameters():
                    if not param.requires_grad and param.device.type == "cpu":
                        param.data = param.data.to(device, non_blocking=True)
        else:
            for _, param in chunk.named_parameters():
                param.data = param.data.to(device, non_blocking=True)
                if param.grad is not None:
                    param.grad = param.grad.to(device, non_blocking=True)
    gc.collect()
    torch.cuda.empty_cache()


def _parts(optimizer):
    """A ChainedOptimizer's DistributedOptimizers, or the one optimizer itself."""
    chained = hasattr(optimizer, "chained_optimizers")
    return optimizer.chained_optimizers if chained else [optimizer]


def _move(optimizer, device, keys):
    for part in _parts(optimizer):
        for group in getattr(part, "shard_fp32_from_float16_groups", None) or []:
            for shard in group:
                if shard is not None:
                    shard.data = shard.data.to(device, non_blocking=True)
        if part.optimizer is None:  # a stub sub-optimizer holds no state
            continue
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
