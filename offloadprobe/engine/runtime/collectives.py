"""CPU emulation over gloo: what megatron-core's collectives need that gloo does not give.

Installed by :func:`emulated_on_gloo` only while a CPU-emulated run spans several ranks,
and only for gloo groups (a call on any other backend goes straight to torch). Each
replacement keeps the real collective's memory behaviour: it writes into the caller's
own output (or into the views megatron hands it) and makes no full-size temporaries.
What is replaced, and how, is said in the run's note (:data:`NOTE`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist


def _is_gloo(group: Any) -> bool:
    try:
        return dist.get_backend(group) == "gloo"
    except (RuntimeError, ValueError):
        return False


def _sizes(splits: Any) -> Any:
    """Split sizes as a list of ints. On a GPU megatron's MoE dispatcher copies them to the
    host (numpy) because the tensors are ``is_cuda``; emulated device tensors are not, so
    they arrive as tensors, which the process-group binding refuses."""
    if isinstance(splits, torch.Tensor):
        return [int(v) for v in splits.tolist()]
    if splits is not None and not isinstance(splits, list):
        return [int(v) for v in splits]
    return splits


def _all_to_all_single(original: Callable[..., Any]) -> Callable[..., Any]:
    def all_to_all_single(
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: Any = None,
        input_split_sizes: Any = None,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        if _is_gloo(group):
            output_split_sizes = _sizes(output_split_sizes)
            input_split_sizes = _sizes(input_split_sizes)
        return original(
            output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op
        )

    return all_to_all_single


_REPLACEMENTS: dict[str, tuple[Callable[[Callable[..., Any]], Callable[..., Any]], str]] = {
    "all_to_all_single": (
        _all_to_all_single,
        "all_to_all_single split sizes given as emulated device tensors are read to host "
        "lists first (a GPU run copies them to the host)",
    ),
}
"""torch.distributed function -> (wrapper factory, what the wrapper does, in words)."""


NOTE_PREFIX = "gloo ranks: "


@contextlib.contextmanager
def emulated_on_gloo() -> Iterator[str]:
    """Install the replacements for gloo groups; yield the note that says what they do."""
    with contextlib.ExitStack() as stack:
        for name, (wrap, _) in _REPLACEMENTS.items():
            original = getattr(dist, name)
            stack.enter_context(mock.patch.object(dist, name, wrap(original)))
        yield NOTE_PREFIX + "; ".join(words for _, words in _REPLACEMENTS.values())
