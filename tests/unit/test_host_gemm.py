"""CPU emulation's bf16 products (``engine/runtime/host_gemm.py``): two matrices laid out
alike are multiplied with one of them copied into the other layout, the same values as
torch's own product up to summation order; every other call is torch's own.

GIVEN bf16 operands in each of the four layouts (and a batched first operand, fp32, ``out``),
WHEN the emulated device's mode multiplies them,
THEN the result has torch's shape and dtype, lies within one bf16 rounding of the fp64
product, is a plain host tensor (a train step's activation, not device memory), carries
the same gradients; and only the layouts that are alike were rearranged.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.runtime import emulation, host_gemm

M, K, N = 24, 96, 40


def _laid(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t if layout == "row" else t.t().contiguous().t()


def _close_to_exact(got: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    exact = a.double() @ b.double()
    # one bf16 rounding of the fp32-accumulated sum: 2**-8 of the value, plus fp32 slack
    bound = exact.abs() * 2**-8 + 1e-3 * (a.double().abs() @ b.double().abs())
    assert (got.double() - exact).abs().le(bound).all()


@pytest.mark.parametrize("la", ["row", "col"])
@pytest.mark.parametrize("lb", ["row", "col"])
def test_each_layout_gives_torchs_product_and_only_alike_ones_are_rearranged(la, lb, monkeypatch):
    seen = []
    real = host_gemm.operands
    monkeypatch.setattr(host_gemm, "operands", lambda *a: seen.append(real(*a)) or seen[-1])
    torch.manual_seed(0)
    a = _laid(torch.randn(M, K, dtype=torch.bfloat16), la)
    b = _laid(torch.randn(K, N, dtype=torch.bfloat16), lb)
    pair = real(torch.matmul, (a, b), None)
    if la != lb:
        assert pair is None  # a layout torch's fast kernel takes: left alone
    else:
        x, y = pair
        assert host_gemm._layout(x) != host_gemm._layout(y)
        assert torch.equal(x, a) and torch.equal(y, b)  # same values, one operand copied
    with emulation.emulated_device() as memory:
        got = a @ b
        assert not memory.holds(got)
    assert len(seen) == 1 and (seen[0] is None) == (pair is None)  # the mode asked
    plain = a @ b
    assert got.shape == plain.shape and got.dtype == plain.dtype == torch.bfloat16
    _close_to_exact(got, a, b)


def test_a_batched_first_operand_is_folded_into_rows_and_given_back_batched():
    torch.manual_seed(1)
    a = torch.randn(8, 3, K, dtype=torch.bfloat16)  # megatron's [s, b, h] grad_output
    b = torch.randn(K, N, dtype=torch.bfloat16)
    x, _ = host_gemm.operands(torch.Tensor.matmul, (a, b), None)
    assert x.shape == (24, K) and host_gemm._layout(x) == "col"
    assert host_gemm.operands(torch.mm, (a, b), None) is None  # mm takes no batch
    with emulation.emulated_device():
        got = a.matmul(b)
    assert got.shape == (8, 3, N)
    _close_to_exact(got.reshape(24, N), a.reshape(24, K), b)


def test_gradients_flow_through_the_rearranged_product():
    torch.manual_seed(2)
    a0 = torch.randn(M, K, dtype=torch.bfloat16)
    b0 = torch.randn(K, N, dtype=torch.bfloat16)
    grads = []
    for emulate in (True, False):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        if emulate:
            with emulation.emulated_device():
                (a @ b).float().sum().backward()
        else:
            (a @ b).float().sum().backward()
        grads.append((a.grad, b.grad))
    (ga, gb), (ra, rb) = grads
    assert ga.shape == ra.shape and gb.shape == rb.shape
    ones = torch.ones(M, N, dtype=torch.bfloat16)
    _close_to_exact(ga, ones, b0.t())
    _close_to_exact(gb, a0.t(), ones)


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b: torch.matmul(a.float(), b.float()),  # fp32: torch's own
        lambda a, b: torch.matmul(a, b, out=torch.empty(M, N, dtype=torch.bfloat16)),
        lambda a, b: torch.matmul(a[:1], b),  # a single row: a GEMV
    ],
)
def test_other_calls_are_torchs_own_to_the_bit(call):
    torch.manual_seed(3)
    a = torch.randn(M, K, dtype=torch.bfloat16)
    b = torch.randn(K, N, dtype=torch.bfloat16)
    with emulation.emulated_device():
        got = call(a, b)
    assert torch.equal(got, call(a, b))
