"""Code that autograd runs with no torch-function mode active, carried under the
CUDA-to-host mode of CPU emulation all the same.

A tensor hook (``Tensor.register_hook``) and a callback queued on the autograd engine
(``Variable._execution_engine.queue_callback``) run inside backward, where torch
activates no torch-function mode. FSDP2 does its backward all-gather in such a hook and
its post-backward finalisation in such a callback, and both allocate ``device="cuda"``:
without the mode those calls reach the real (absent) CUDA. While the emulated device is
active each hook and callback runs under the mode, unless one is active already.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack


def _carried(
    function: Callable[..., Any], mode: type[TorchFunctionMode], active: Callable[[], bool]
) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not active() or any(isinstance(m, mode) for m in _get_current_function_mode_stack()):
            return function(*args, **kwargs)
        with mode():
            return function(*args, **kwargs)

    return call


class _Engine:
    """The autograd engine, with the callbacks queued on it carried under the mode."""

    def __init__(self, engine: Any, carry: Callable[[Callable[..., Any]], Callable[..., Any]]):
        self._engine = engine
        self._carry = carry

    def queue_callback(self, callback: Callable[[], Any]) -> Any:
        return self._engine.queue_callback(self._carry(callback))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@contextlib.contextmanager
def hooks_under(mode: type[TorchFunctionMode], active: Callable[[], bool]) -> Iterator[None]:
    """Inside the block, tensor hooks registered and engine callbacks queued run under
    ``mode`` while ``active()`` says the emulated device is."""
    carry = functools.partial(_carried, mode=mode, active=active)
    original = torch.Tensor.register_hook

    def register_hook(self: torch.Tensor, hook: Callable[..., Any]) -> Any:
        return original(self, carry(hook))

    variable = torch.autograd.Variable
    with (
        mock.patch.object(torch.Tensor, "register_hook", register_hook),
        mock.patch.object(
            variable, "_execution_engine", _Engine(variable._execution_engine, carry)
        ),
    ):
        yield
