"""bf16 matrix products on the host, computed the way PyTorch's CPU kernels do them fast.

On a CPU without bf16 units, PyTorch's bf16 GEMM is fast when one operand is row-major and
the other column-major, and 10 to 30 times slower when both are laid out alike: megatron's
input gradient ``grad_output.matmul(weight)`` (both row-major) took 0.55 s for a
[32, 9216] x [9216, 640] product that takes 20 ms with its first operand column-major. Its
weight gradient ``grad_output.t().matmul(input)`` (a sum over the step's few tokens) is
slow in every bf16 layout: 0.1 to 0.3 s for [9216, 32] x [32, 640] on one thread, 17 ms in
fp32. CPU emulation trains megatron's model on the host, so these two were most of a small
run's train step. :func:`matmul` computes

- a product over few terms (the second operand, in fp32, within ``BLOCK_BYTES``) in fp32,
  ``BLOCK_BYTES`` of result rows at a time, each rounded to bf16;
- two matrices laid out alike with the smaller one copied into the other layout.

Both are the bf16 product with fp32 accumulation: equal up to summation order (about 1
element in 2,500 one bf16 ulp apart, the error against an fp64 product the same). Each is a
host-side transient of at most ``BLOCK_BYTES`` per block, or the size of the copied
operand, in train steps only: no figure counts a train row.
"""

from __future__ import annotations

from typing import Any

import torch

_FOLDING = frozenset({torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__})
"""Products that fold the leading dimensions of a batched first operand into its rows."""
GEMMS = _FOLDING | {torch.mm, torch.Tensor.mm}
"""The products :func:`matmul` may take over (two tensor arguments, no ``out``)."""
BLOCK_BYTES = 1 << 20
"""fp32 scratch of a blocked product: the second operand, and each block of result rows."""


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


def plan(func: object, args: tuple, kwargs: dict | None) -> tuple[str, Any, Any] | None:
    """How to compute ``func(*args, **kwargs)``: ``("blocked", a, b)`` (fp32 by blocks of
    rows), ``("mm", a, b)`` (the smaller operand already copied into the other layout),
    with ``a`` folded to 2-D; or None where the call is left as it is: not two bf16 host
    matrices, or already laid out for the fast kernel."""
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
    differentiable = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if 4 * b.numel() <= BLOCK_BYTES and not differentiable:
        return "blocked", a2, b
    layout = _layout(a2)
    if layout is None or layout != _layout(b):
        return None
    if a2.numel() <= b.numel():
        return "mm", _flipped(a2, layout), b
    return "mm", a2, _flipped(b, layout)


def _blocked(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in fp32, ``BLOCK_BYTES`` of result rows at a time, rounded to bf16."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    wide = b.float()
    rows = max(1, BLOCK_BYTES // (4 * b.shape[1]))
    for start in range(0, a.shape[0], rows):
        out[start : start + rows] = torch.mm(a[start : start + rows].float(), wide)
    return out


def matmul(func: object, args: tuple, kwargs: dict | None) -> Any:
    """``func(*args, **kwargs)``, by :func:`plan` where it applies."""
    how = plan(func, args, kwargs)
    if how is None:
        return func(*args, **(kwargs or {}))  # type: ignore[operator]
    kind, a2, b = how
    out = _blocked(a2, b) if kind == "blocked" else torch.mm(a2, b)
    a = args[0]
    return out if a.dim() == 2 else out.view(*a.shape[:-1], out.shape[1])
