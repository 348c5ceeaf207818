"""Parameters outside the DDP buffers whose storage is not exactly their own bytes (found
in review): two views of one flat tensor, a parameter at a storage offset, a transposed
one. Each comes back whole and bit for bit from every strategy. Fakes, CPU, no megatron.

Once each strategy moved the first parameter's bytes of a storage and freed it all, and
the chunked strategies could not view a transposed one. Fixed: ``loose_parameters``
yields each storage whole, one flat byte tensor up to the last byte any parameter views,
and ``restore_storage`` reaches a tensor's last byte."""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.hugepin_pipeline import HugePinStrategy, Settings
from offloadprobe.engine.model.buffers import free_storage, restore_storage
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies import model_strategy, pipelined

CPU = Runtime(device="cpu", emulated=True, note=None)


def _build(name):
    if name in ("hugepin", "relock"):
        settings = Settings(threads=1, chunk_bytes=2**20)
        return HugePinStrategy(CPU, ephemeral=name == "relock", settings=settings)
    if name == "pipelined":
        return pipelined.PipelinedStrategy(CPU)
    return model_strategy(name).build(CPU)


def _close(strategy):
    getattr(strategy, "close", lambda: None)()


class _SharedStorage(torch.nn.Module):
    """A reference model whose two weights are views of one flat storage (weights loaded
    from one flat buffer, a fused weight split in two)."""

    def __init__(self):
        super().__init__()
        flat = torch.randn(2 * 4096, generator=torch.Generator().manual_seed(0))
        flat = flat.to(torch.bfloat16)
        self.a = torch.nn.Parameter(flat[:4096], requires_grad=False)
        self.b = torch.nn.Parameter(flat[4096:], requires_grad=False)


@pytest.mark.parametrize("name", ["lazy", "pageable", "pipelined", "hugepin", "relock"])
def test_two_loose_parameters_in_one_storage_both_come_back(name):
    ref = _SharedStorage()
    storage_bytes = ref.a.untyped_storage().nbytes()
    originals = [p.detach().clone() for p in ref.parameters()]
    strategy = _build(name)
    try:
        strategy.offload([ref])
        assert ref.a.untyped_storage().nbytes() == 0
        strategy.load([ref])
        # checked first: with a storage too small, reading b would go out of bounds
        assert ref.a.untyped_storage().nbytes() == storage_bytes
        assert all(torch.equal(p, o) for p, o in zip(ref.parameters(), originals, strict=True))
    finally:
        _close(strategy)


def test_a_restored_storage_covers_a_parameter_with_a_storage_offset():
    big = torch.zeros(8192, dtype=torch.bfloat16)
    param = torch.nn.Parameter(big[4096:], requires_grad=False)
    del big
    free_storage(param)
    restore_storage(param)  # what every load does before it writes the parameter
    extent = (param.storage_offset() + param.numel()) * param.element_size()
    assert param.untyped_storage().nbytes() >= extent


@pytest.mark.parametrize("name", ["pipelined", "hugepin", "relock"])
def test_a_non_contiguous_loose_parameter_round_trips(name):
    ref = torch.nn.Module()
    weight = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    ref.w = torch.nn.Parameter(weight.to(torch.bfloat16).t(), requires_grad=False)
    original = ref.w.detach().clone()
    strategy = _build(name)
    try:
        strategy.offload([ref])
        strategy.load([ref])
        assert torch.equal(ref.w, original)
    finally:
        _close(strategy)


def test_lazy_moves_a_non_contiguous_loose_parameter():
    """The control for the test above: what the chunked strategies should match."""
    ref = torch.nn.Module()
    weight = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    ref.w = torch.nn.Parameter(weight.to(torch.bfloat16).t(), requires_grad=False)
    original = ref.w.detach().clone()
    strategy = _build("lazy")
    strategy.offload([ref])
    assert ref.w.untyped_storage().nbytes() == 0
    strategy.load([ref])
    assert torch.equal(ref.w, original)
