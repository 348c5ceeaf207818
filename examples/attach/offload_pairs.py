"""Offload and load functions of the shapes verl's Megatron workers use, written for this
example (not verl's code): each takes the list of megatron DDP model chunks.

* ``offload_model_pre`` / ``load_model_pre``: the shape before the fix: every offload
  makes a fresh host copy of each DDP ``param_data`` buffer (on CUDA ``.cpu()`` then
  ``.pin_memory()``: a pageable temporary and a pinned copy), while the previous cycle's
  copy is still referenced; the old copy goes only when the new one replaces it. The
  host peak over the call's start is about twice the buffer, on every call.
* ``offload_model_post`` / ``load_model_post``: the shape after the fix: one host buffer
  per DDP buffer, made on the first offload (pinned on CUDA) and kept; later offloads
  ``copy_`` into it. The peak over the call's start is the buffer on the first call and
  about nothing after.
* ``offload_model_mcore`` / ``load_model_mcore``: megatron-core's own
  ``_ParamAndGradBuffer.offload_to_cpu`` / ``reload_from_cpu`` on every buffer.

All of them free the buffers' device storage (params and grads) with ``resize_(0)`` and
give it back on load, as verl does. ``rollout`` stands in for generation between
offload and load: it takes device memory for a KV cache and gives it back.
"""

from __future__ import annotations

import gc

import torch

_HOST = "_example_host_copy"


def buffers(models):
    """Every DDP param-and-grad buffer of the chunks, dense and expert-parallel."""
    for chunk in models:
        yield from chunk.buffers
        yield from getattr(chunk, "expert_parallel_buffers", None) or []


def _free(tensor):
    tensor.untyped_storage().resize_(0)


def _restore(tensor):
    tensor.untyped_storage().resize_(tensor.numel() * tensor.element_size())


def _pinned_if_possible(tensor):
    """A page-locked copy on CUDA; on a host without a GPU, a second host copy in its
    place (there is no pinned memory to make)."""
    return tensor.pin_memory() if torch.cuda.is_available() else tensor.clone()


@torch.no_grad()
def offload_model_pre(models):
    for buffer in buffers(models):
        if buffer.param_data.untyped_storage().nbytes():
            staged = buffer.param_data.cpu()
            fresh = _pinned_if_possible(staged)
            del staged
            setattr(buffer, _HOST, fresh)  # the previous copy lived until here
            _free(buffer.param_data)
        if buffer.grad_data.untyped_storage().nbytes():
            _free(buffer.grad_data)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@torch.no_grad()
def offload_model_post(models):
    for buffer in buffers(models):
        if buffer.param_data.untyped_storage().nbytes():
            kept = getattr(buffer, _HOST, None)
            param = buffer.param_data
            if kept is None or kept.shape != param.shape or kept.dtype != param.dtype:
                kept = torch.empty(
                    param.shape,
                    dtype=param.dtype,
                    device="cpu",
                    pin_memory=torch.cuda.is_available(),
                )
                setattr(buffer, _HOST, kept)
            kept.copy_(param)
            _free(param)
        if buffer.grad_data.untyped_storage().nbytes():
            _free(buffer.grad_data)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@torch.no_grad()
def _load(models):
    for buffer in buffers(models):
        param = buffer.param_data
        if not param.untyped_storage().nbytes():
            _restore(param)
            param.copy_(getattr(buffer, _HOST), non_blocking=True)
        grad = buffer.grad_data
        if not grad.untyped_storage().nbytes():
            _restore(grad)
            grad.zero_()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    gc.collect()


def load_model_pre(models):
    _load(models)


def load_model_post(models):
    _load(models)


def offload_model_mcore(models):
    for buffer in buffers(models):
        buffer.offload_to_cpu(move_params=True, move_grads=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load_model_mcore(models):
    for buffer in buffers(models):
        buffer.reload_from_cpu(move_params=True, move_grads=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


PAIRS = ("pre", "post", "mcore")
"""``--offload`` choices: ``offload_model_<pair>`` and ``load_model_<pair>``."""


def pair(name: str):
    """The pair's functions, looked up on this module at call time (so a wrapper that
    replaced them is what runs: a dict of the functions made at import would hold the
    originals, which ``attach`` cannot reach)."""
    module = __import__(__name__)
    return getattr(module, f"offload_model_{name}"), getattr(module, f"load_model_{name}")


def rollout(nbytes: int, device) -> float:
    """Generation's stand-in: a KV cache of ``nbytes`` on the device, written and read."""
    cache = torch.empty(max(1, nbytes // 2), dtype=torch.bfloat16, device=device)
    cache.fill_(1.0)
    value = float(cache[:1024].float().sum())
    del cache
    return value
