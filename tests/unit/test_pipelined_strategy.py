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
