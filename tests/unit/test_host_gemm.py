"""CPU emulation's bf16 products (``engine/runtime/host_gemm.py``): a product over few terms
is computed in fp32 by blocks of rows, two matrices laid out alike with one of them copied
into the other layout; the same values as torch's own product up to summation order;
every other call is torch's own.

GIVEN bf16 operands in each of the four layouts, a weight-gradient shape (few terms), a
batched first operand, operands that need gradients, fp32, ``out``,
WHEN the emulated device's mode multiplies them,
THEN the result has torch's shape and dtype, lies within one bf16 rounding of the fp64
product, is a plain host tensor (a train step's activation, not device memory), carries
the same gradients; and only the calls the plan names were computed another way.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.runtime import emulation, host_gemm

M, K, N = 24, 640, 520  # a second operand over BLOCK_BYTES in fp32: never blocked


def _laid(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t if layout == "row" else t.t().contiguous().t()


def _close_to_exact(got: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    exact = a.double() @ b.double()
    # one bf16 rounding of the fp32-accumulated sum: 2**-8 of the value, plus fp32 slack
    bound = exact.abs() * 2**-8 + 1e-3 * (a.double().abs() @ b.double().abs())
    assert (got.double() - exact).abs().le(bound).all()


def _spy(monkeypatch) -> list:
    seen = []
    real = host_gemm.plan
    monkeypatch.setattr(host_gemm, "plan", lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


@pytest.mark.parametrize("la", ["row", "col"])
@pytest.mark.parametrize("lb", ["row", "col"])
def test_each_layout_gives_torchs_product_and_only_alike_ones_are_rearranged(la, lb, monkeypatch):
    torch.manual_seed(0)
    a = _laid(torch.randn(M, K, dtype=torch.bfloat16), la)
    b = _laid(torch.randn(K, N, dtype=torch.bfloat16), lb)
    how = host_gemm.plan(torch.matmul, (a, b), None)
    if la != lb:
        assert how is None  # a layout torch's fast kernel takes: left alone
    else:
        kind, x, y = how
        assert kind == "mm" and host_gemm._layout(x) != host_gemm._layout(y)
        assert torch.equal(x, a) and torch.equal(y, b)  # same values, one operand copied
    seen = _spy(monkeypatch)
    with emulation.emulated_device() as memory:
        got = a @ b
        assert not memory.holds(got)
    assert len(seen) == 1 and (seen[0] is None) == (how is None)  # the mode asked
    plain = a @ b
    assert got.shape == plain.shape and got.dtype == plain.dtype == torch.bfloat16
    _close_to_exact(got, a, b)


@pytest.mark.parametrize("rows", [3, 700, 9000])
def test_a_weight_gradient_over_few_tokens_is_blocked_fp32(rows, monkeypatch):
    torch.manual_seed(4)
    grad_output = torch.randn(32, rows, dtype=torch.bfloat16)  # [tokens, out]
    inputs = torch.randn(32, 96, dtype=torch.bfloat16)  # [tokens, in]
    a = grad_output.t()  # megatron's grad_output.t().matmul(total_input)
    kind, _, _ = host_gemm.plan(torch.Tensor.matmul, (a, inputs), None)
    assert kind == "blocked"
    seen = _spy(monkeypatch)
    with emulation.emulated_device() as memory, torch.no_grad():
        got = a.matmul(inputs)
        assert not memory.holds(got)
    assert seen and seen[0][0] == "blocked"
    assert got.shape == (rows, 96) and got.dtype == torch.bfloat16 and got.is_contiguous()
    _close_to_exact(got, a, inputs)


def test_a_batched_first_operand_is_folded_into_rows_and_given_back_batched():
    torch.manual_seed(1)
    a = torch.randn(8, 3, K, dtype=torch.bfloat16)  # megatron's [s, b, h] grad_output
    b = torch.randn(K, N, dtype=torch.bfloat16)
    kind, x, _ = host_gemm.plan(torch.Tensor.matmul, (a, b), None)
    assert kind == "mm" and x.shape == (24, K) and host_gemm._layout(x) == "col"
    assert host_gemm.plan(torch.mm, (a, b), None) is None  # mm takes no batch
    with emulation.emulated_device():
        got = a.matmul(b)
    assert got.shape == (8, 3, N)
    _close_to_exact(got.reshape(24, N), a.reshape(24, K), b)


@pytest.mark.parametrize("k", [K, 16])  # rearranged; small enough to block (not: grads)
def test_gradients_flow_through_the_product(k):
    torch.manual_seed(2)
    a0 = torch.randn(M, k, dtype=torch.bfloat16)
    b0 = torch.randn(k, N, dtype=torch.bfloat16)
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
