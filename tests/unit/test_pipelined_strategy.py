"""``pipelined`` on fake DDP buffers: exact host memory, chunked copies, bit-exact round trips."""

from types import SimpleNamespace

import torch

from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies import pipelined

CPU = Runtime(device="cpu", emulated=True, note=None)


def _model(numel):
    gen = torch.Generator().manual_seed(1)
    buf = SimpleNamespace(
        param_data=torch.randn(numel, generator=gen).to(torch.bfloat16),
        grad_data=torch.randn(numel, generator=gen),
    )
    return [SimpleNamespace(buffers=[buf], expert_parallel_buffers=[])], buf


def test_round_trips_are_bit_exact_through_many_chunks(monkeypatch):
    monkeypatch.setattr(pipelined, "CHUNK_BYTES", 8192)
    models, buf = _model(3 * 4096 + 7)  # chunks of 8 KiB, the last one short
    original = buf.param_data.clone()
    strategy = pipelined.PipelinedStrategy(CPU)
    for _ in range(2):
        strategy.offload(models)
        assert buf.param_data.untyped_storage().nbytes() == 0
        assert buf.grad_data.untyped_storage().nbytes() == 0
        strategy.load(models)
        assert torch.equal(buf.param_data, original)
        assert not buf.grad_data.any()
    (mapping,) = strategy.mappings.values()
    assert mapping.nbytes == original.numel() * 2  # exactly the payload
    assert mapping.length - mapping.nbytes < 4096
    assert sum(n for _, n in mapping.chunks) == mapping.nbytes and len(mapping.chunks) == 4
    strategy.close()
    assert strategy.mappings == {}


def test_host_mapping_is_reused_after_the_first_offload():
    models, _ = _model(4096)
    strategy = pipelined.PipelinedStrategy(CPU)
    strategy.offload(models)
    first = next(iter(strategy.mappings.values())).address
    strategy.load(models)
    strategy.offload(models)
    assert next(iter(strategy.mappings.values())).address == first
    strategy.close()


def test_parameters_outside_the_buffers_get_an_exact_mapping_each():
    models, buf = _model(4096)
    torch.manual_seed(2)
    reference = torch.nn.Linear(64, 96).to(torch.bfloat16).requires_grad_(False)
    models.append(reference)  # not DDP-wrapped: every parameter is loose
    loose = list(reference.parameters())
    originals = [p.detach().clone() for p in loose]
    strategy = pipelined.PipelinedStrategy(CPU)
    for _ in range(2):
        strategy.offload(models)
        assert all(p.untyped_storage().nbytes() == 0 for p in loose)
        strategy.offload(models)  # offloaded already: nothing to copy, nothing freed twice
        strategy.load(models)
        strategy.load(models)
        assert all(torch.equal(p, o) for p, o in zip(loose, originals, strict=True))
    sizes = sorted(m.nbytes for m in strategy.mappings.values())
    assert sizes == sorted([buf.param_data.numel() * 2] + [p.numel() * 2 for p in loose])
    strategy.close()
