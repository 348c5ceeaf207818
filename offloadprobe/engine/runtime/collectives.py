"""CPU emulation over gloo: megatron-core's collectives with a GPU collective's memory.

gloo (torch 2.13) runs every collective megatron calls at tp/pp/ep/vpp layouts, but two of
them copy through a full-size host temporary that NCCL never makes (measured: +64 MiB of
peak RSS for a 64 MiB buffer): ``reduce_scatter_tensor`` (the distributed optimizer's
gradient reduce-scatter) and ``all_gather_into_tensor`` (its parameter all-gather). In CPU
emulation that temporary would land in every train phase's host peak. While a CPU-emulated
run spans several ranks, and for gloo groups only, :func:`emulated_on_gloo` replaces them:

- reduce-scatter whose output is this rank's chunk of the input (megatron's case): one
  in-place ``all_reduce`` of the input; the output chunk then holds the reduced shard
  (the other chunks hold the reduced values too, where NCCL leaves local ones; megatron
  reads only its own shard). Any other reduce-scatter goes to gloo's own.
- all-gather: the input is copied into this rank's chunk of the output (nothing to copy
  when it is that chunk already), then each rank's chunk is broadcast in place.
- megatron's ``_coalescing_manager`` around them runs the calls one by one, synchronously
  (gloo's coalesced forms flatten through temporaries as well).
- ``all_to_all_single`` split sizes that are emulated device tensors are read into host
  lists first (on a GPU megatron copies them to the host; here they are not ``is_cuda``).

What is replaced, and how, is said in the run's note.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist

NOTE = (
    "gloo ranks: reduce_scatter_tensor is an in-place all_reduce and all_gather_into_tensor "
    "in-place broadcasts of each rank's chunk, without gloo's full-size temporaries; "
    "coalesced calls run one by one"
)

_MEGATRON_MODULES = (
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.tensor_parallel.mappings",
    "megatron.core.tensor_parallel.layers",
    "megatron.core.tensor_parallel.utils",
)
"""Modules that bind torch's collectives to their own names at import."""


class Done:
    """The handle of a collective that has completed (the emulation runs them synchronously)."""

    def wait(self, *args: object) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def is_gloo(group: Any) -> bool:
    try:
        return dist.get_backend(group) == "gloo"
    except (RuntimeError, ValueError):
        return False


def _own_chunk(whole: torch.Tensor, part: torch.Tensor, group: Any) -> torch.Tensor | None:
    """This rank's chunk of ``whole`` (split evenly over the group along its elements), or
    None when ``whole`` cannot be split so without a copy."""
    size = dist.get_world_size(group)
    if not whole.is_contiguous() or whole.numel() != part.numel() * size:
        return None
    return whole.view(-1).view(size, -1)[dist.get_rank(group)]


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.numel() == b.numel() and a.dtype == b.dtype


def reduce_scatter_tensor(original: Callable[..., Any]) -> Callable[..., Any]:
    """``reduce_scatter_tensor`` for gloo groups: an in-place all-reduce when the output is
    this rank's chunk of the input; gloo's own otherwise."""

    def call(
        output: torch.Tensor,
        input: torch.Tensor,
        op: Any = dist.ReduceOp.SUM,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        chunk = _own_chunk(input, output, group) if is_gloo(group) else None
        if chunk is None or not _same_memory(chunk, output) or not output.is_contiguous():
            return original(output, input, op=op, group=group, async_op=async_op)
        dist.all_reduce(input, op=op, group=group)
        return Done() if async_op else None

    return call


def all_gather_into_tensor(original: Callable[..., Any]) -> Callable[..., Any]:
    """``all_gather_into_tensor`` for gloo groups: every chunk broadcast in place from its
    rank into the output."""

    def call(
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        chunk = _own_chunk(output_tensor, input_tensor, group) if is_gloo(group) else None
        if chunk is None:
            return original(output_tensor, input_tensor, group=group, async_op=async_op)
        if not _same_memory(chunk, input_tensor):
            chunk.copy_(input_tensor.reshape(-1))
        chunks = output_tensor.view(-1).view(dist.get_world_size(group), -1)
        for index, part in enumerate(chunks):
            dist.broadcast(
                part, src=dist.get_global_rank(group or dist.group.WORLD, index), group=group
            )
        return Done() if async_op else None

    return call


def coalescing_manager(original: Callable[..., Any]) -> Callable[..., Any]:
    """megatron's ``_coalescing_manager``: on a gloo group the calls inside run as they are
    made (synchronously), and the manager's handle is already done."""

    @contextlib.contextmanager
    def manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Iterator[Any]:
        if not is_gloo(group):
            with original(group, device, async_ops=async_ops) as cm:
                yield cm
            return
        yield Done()

    return manager


def all_to_all_single(original: Callable[..., Any]) -> Callable[..., Any]:
    """``all_to_all_single`` with split sizes that are tensors read into host lists."""

    def call(
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: Any = None,
        input_split_sizes: Any = None,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        if is_gloo(group):
            output_split_sizes = _sizes(output_split_sizes)
            input_split_sizes = _sizes(input_split_sizes)
        return original(
            output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op
        )

    return call


def _sizes(splits: Any) -> Any:
    if isinstance(splits, torch.Tensor):
        return [int(v) for v in splits.tolist()]
    if splits is not None and not isinstance(splits, list):
        return [int(v) for v in splits]
    return splits


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "all_gather_into_tensor": all_gather_into_tensor,
    "all_to_all_single": all_to_all_single,
    "_coalescing_manager": coalescing_manager,
}
_MEGATRON_NAMES = {
    "dist_reduce_scatter_func": "reduce_scatter_tensor",
    "dist_all_gather_func": "all_gather_into_tensor",
    "_coalescing_manager": "_coalescing_manager",
}
"""Names megatron modules bind torch's functions to -> the torch function."""


@contextlib.contextmanager
def emulated_on_gloo() -> Iterator[str]:
    """Install the replacements (in ``torch.distributed`` and where megatron bound torch's
    functions at import); yield the note that says what they do."""
    with contextlib.ExitStack() as stack:
        originals = {name: getattr(dist, name) for name in _WRAPPERS}
        replaced = {name: wrap(originals[name]) for name, wrap in _WRAPPERS.items()}
        for name, function in replaced.items():
            stack.enter_context(mock.patch.object(dist, name, function))
        for module_name in _MEGATRON_MODULES:
            module = importlib.import_module(module_name)
            for bound, name in _MEGATRON_NAMES.items():
                if getattr(module, bound, None) is originals[name]:
                    stack.enter_context(mock.patch.object(module, bound, replaced[name]))
        yield NOTE
