"""CPU emulation runs megatron-core's fused helpers eagerly: torch.compile is off.

megatron-core wraps its small fused helpers (bias-GeLU, bias-SwiGLU, dropout-add, ...) in
``torch.compile`` when its modules are imported. Compiling them needs inductor and a C++
build in every process, and importing torch's compiler stack alone takes about 2 s of
CPU; on a host without a GPU both buy nothing (a few train steps, no offload or load
phase runs compiled code). With ``TORCHDYNAMO_DISABLE`` set, a compiled function calls
the original one; while megatron-core is first imported here, ``torch.compile`` hands back
the function it is given, which is the same call without importing the compiler.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

EAGER_NOTE = (
    "torch.compile off in CPU emulation: megatron's fused helpers run eagerly (same maths; "
    "no inductor C++ build in every process)"
)


_SET_HERE = False
"""Whether this process set ``TORCHDYNAMO_DISABLE`` itself (then a worker it starts is not
handed the variable: the choice is each worker's own, and only the user's carries over)."""


def set_here() -> bool:
    return _SET_HERE


def eager_fusions() -> bool:
    """CPU emulation: turn torch.compile off before megatron wraps its fused helpers in it,
    and import megatron-core that way if it is not imported yet. False when the user set
    ``TORCHDYNAMO_DISABLE`` themselves (their choice stands)."""
    global _SET_HERE
    if "TORCHDYNAMO_DISABLE" in os.environ and not _SET_HERE:
        return False
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # read when torch._dynamo's config is imported
    _SET_HERE = True
    config = sys.modules.get("torch._dynamo.config")
    if config is not None:
        config.disable = True
    import_megatron_uncompiled()
    return True


def import_megatron_uncompiled() -> None:
    """Import megatron-core with ``torch.compile`` as the identity (see the module's text):
    its fused helpers are the plain functions. A no-op once megatron-core is imported."""
    if "megatron.core" in sys.modules:
        return
    with _compile_is_identity():
        import megatron.core
        import megatron.core.jit  # noqa: F401  (binds jit_fuser for every later import)


def _identity_compile(model: Callable[..., Any] | None = None, **_: Any) -> Any:
    """``torch.compile`` that compiles nothing: ``@torch.compile``, ``torch.compile(fn)``
    and ``torch.compile(**options)(fn)`` all give back ``fn``."""
    return model if model is not None else (lambda fn: fn)


@contextlib.contextmanager
def _compile_is_identity() -> Iterator[None]:
    import torch

    real = torch.compile
    torch.compile = _identity_compile
    try:
        yield
    finally:
        torch.compile = real
