"""The mcore strategies' guards and the emulation shims they rely on."""

import pytest
import torch

from offloadprobe.core.errors import StrategyError
from offloadprobe.engine.model import buffers
from offloadprobe.engine.runtime import emulation
from offloadprobe.engine.strategies import mcore


def test_missing_megatron_method_names_the_version(monkeypatch):
    class OldBuffer:
        def offload_to_cpu(self):
            pass

    monkeypatch.setattr(buffers, "megatron_version", lambda: "0.12.0")
    with pytest.raises(StrategyError) as err:
        buffers.require_methods(OldBuffer, mcore.BUFFER_METHODS, "_ParamAndGradBuffer")
    assert err.value.exit_code == 2
    assert "megatron-core 0.12.0" in str(err.value)
    assert "_ParamAndGradBuffer.reload_from_cpu()" in str(err.value)


def test_installed_megatron_has_the_methods():
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBuffer
    from megatron.core.optimizer import MegatronOptimizer

    buffers.require_methods(_ParamAndGradBuffer, mcore.BUFFER_METHODS, "buffer")
    buffers.require_methods(MegatronOptimizer, ("offload_to_cpu", "restore_from_cpu"), "opt")


def test_is_cuda_answers_as_on_a_gpu_only_inside_the_block(monkeypatch):
    class Memory:
        def __init__(self, *device):
            self.device = {t.untyped_storage()._cdata for t in device}

        def holds(self, tensor):
            return tensor.untyped_storage()._cdata in self.device

    state, step = torch.ones(8), torch.tensor(3.0)
    monkeypatch.setattr(emulation, "ACTIVE", Memory(state))
    with emulation.is_cuda_as_on_gpu():
        assert state.is_cuda and state[2:].is_cuda  # views of device storage too
        assert not step.is_cuda  # torch keeps an optimizer's step on the host
    assert not state.is_cuda


def test_transfer_of_freed_storage_is_an_error_not_a_read():
    buffer = torch.ones(1024)
    view = buffer[10:20]
    buffer.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="invalid argument"):
        emulation._require_storage(view)
    emulation._require_storage(torch.ones(4)[1:])  # allocated: no error
