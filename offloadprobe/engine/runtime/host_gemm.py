"""bf16 matrix products on the host, in an operand layout PyTorch's fast CPU kernel takes.

On a CPU without bf16 units, PyTorch's bf16 GEMM is fast when one operand is row-major and
the other column-major, and 10 to 30 times slower when both are laid out alike: megatron's
input gradient ``grad_output.matmul(weight)`` (both row-major) takes 0.55 s for a
[32, 9216] x [9216, 640] product that takes 20 ms with its first operand column-major. CPU
emulation trains megatron's model on the host, so that one layout was most of a small run's
train step. :func:`matmul` copies the smaller operand into the other layout first: the same
bf16 product with fp32 accumulation, equal up to summation order (about 1 element in 2,500
one bf16 ulp apart, the error against an fp64 product the same). A host-side transient the
size of that operand, in train steps only: no figure counts a train row.
"""

from __future__ import annotations

from typing import Any

import torch

_FOLDING = frozenset({torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__})
"""Products that fold the leading dimensions of a batched first operand into its rows."""
GEMMS = _FOLDING | {torch.mm, torch.Tensor.mm}
"""The products :func:`matmul` may take over (two tensor arguments, no ``out``)."""


def _layout(t: torch.Tensor) -> str | None:
    """``"row"`` or ``"col"`` for a 2-D matrix with unit stride along one dimension."""
    rows, cols = t.shape
    if t.stride(1) == 1 and t.stride(0) >= cols:
        return "row"
    if t.stride(0) == 1 and t.stride(1) >= rows:
        return "col"
    return None


def _flipped(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A copy of ``t`` in the other layout."""
    return t.t().contiguous().t() if layout == "row" else t.contiguous()


def _matrix(func: object, a: torch.Tensor) -> torch.Tensor | None:
    """``a`` as the product's 2-D first operand, or None where it is not one."""
    if a.dim() == 2:
        return a
    if a.dim() > 2 and func in _FOLDING and a.is_contiguous():
        return a.view(-1, a.shape[-1])
    return None


def operands(func: object, args: tuple, kwargs: dict | None) -> tuple[Any, Any] | None:
    """The two matrices to multiply in place of ``func(*args, **kwargs)`` (the first
    operand folded to 2-D, the smaller one copied into the other's layout), or None where
    the call is left as it is: not two bf16 host matrices laid out alike."""
    if kwargs or len(args) != 2:
        return None
    a, b = args
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or a.is_cuda or b.is_cuda:
        return None  # (in CPU emulation ``device`` says cuda of host tensors it holds)
    a2 = _matrix(func, a)
    if a2 is None or b.dim() != 2 or a2.shape[1] != b.shape[0] or min(*a2.shape, b.shape[1]) < 2:
        return None
    layout = _layout(a2)
    if layout is None or layout != _layout(b):
        return None
    if a2.numel() <= b.numel():
        return _flipped(a2, layout), b
    return a2, _flipped(b, layout)


def matmul(func: object, args: tuple, kwargs: dict | None) -> Any:
    """``func(*args, **kwargs)``, through :func:`operands` where it applies."""
    pair = operands(func, args, kwargs)
    if pair is None:
        return func(*args, **(kwargs or {}))  # type: ignore[operator]
    out = torch.mm(*pair)
    a = args[0]
    return out if a.dim() == 2 else out.view(*a.shape[:-1], out.shape[1])
