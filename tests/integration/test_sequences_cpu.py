"""Phase sequences (``--sequence``): every preset for every built-in strategy, and a
strategy that breaks on an unusual step reported at that step.

The matrix runs the real steps (``engine.sequence.Steps``: the moves, the fingerprint
checks after every load, the blame) on one tiny model shared by every strategy, in CPU
emulation, with a bare host in place of the measured runner: what is in question is
whether each strategy keeps the invariant (an offload of what is offloaded, a load of
what is loaded, is a no-op), not what the phases cost. Its "train" is a stand-in that
changes every parameter and optimizer tensor (a real step costs more than every move of
the matrix together), so a load that brings stale bytes back is seen; its checkpoint
steps save and remove files as the runner's do. ``tms`` needs a
CUDA GPU (``tests/gpu``). The runner's own path, measured: ``test_sequence_run_cpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.sequences import PRESETS, parse_sequence, steps_of
from offloadprobe.engine.checkpoint import save_and_remove
from offloadprobe.engine.model.buffers import ddp_buffers, is_freed
from offloadprobe.engine.model.builder import build_probe_model
from offloadprobe.engine.model.train import train_step
from offloadprobe.engine.optimizer.holdings import holdings
from offloadprobe.engine.optimizer.strategies import optimizer_strategy
from offloadprobe.engine.runtime import open_runtime
from offloadprobe.engine.sequence import Steps
from offloadprobe.engine.strategies import model_strategy

MODEL = ModelConfig(
    num_layers=1, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=16
)
MODEL_STRATEGIES = ["naive", "lazy", "registered", "pipelined", "pageable", "mcore"]
MODEL_STRATEGIES += ["hugepin", "relock", "none"]
OPTIMIZER_STRATEGIES = ["legacy", "fixed", "complete", "mcore"]
BREAKS = "tests.integration.sequence_strategies:"


@pytest.fixture(scope="module")
def runtime():
    with open_runtime("cpu", 3) as rt:
        yield rt


@pytest.fixture(scope="module")
def model(runtime):
    """One model for the whole matrix, trained once so the optimizer has its state."""
    built = build_probe_model(MODEL, runtime, seed=3)
    train_step(built)
    return built


class BareHost:
    """The moves of a pair of strategies on a model, each in the strategies' context, and
    whether each parameter offload left every buffer freed; nothing measured."""

    def __init__(self, runtime, model, params: str, optimizer: str = "none") -> None:
        self.runtime, self.model = runtime, model
        self.problems: list[str] = []
        self.grads_freed = False
        self.offloads: list[bool] = []
        self.written: list[int] = []
        with runtime.strategy_code():
            self.strategy = model_strategy(params).build(runtime)
            self.optimizer_strategy = optimizer_strategy(optimizer).build(runtime)
        self.moves_optimizer = optimizer != "none"

    def phase(self, cycle, name, action):
        action()
        if name == "offload":
            self.grads_freed = all(is_freed(b.grad_data) for b in ddp_buffers(self.model.chunks))
            self.offloads.append(
                all(is_freed(b.param_data) for b in ddp_buffers(self.model.chunks))
            )

    def moves(self, offload):
        verb = "offload" if offload else "load"
        code = self.runtime.strategy_code

        def within(action, arg):
            def run():
                with code():
                    action(arg)

            return run

        steps = [(verb, within(getattr(self.strategy, verb), self.model.chunks))]
        if self.moves_optimizer:
            optimizer = getattr(self.optimizer_strategy, verb)
            steps.append((f"{verb} optimizer", within(optimizer, [self.model.optimizer])))
        return steps

    def close(self):
        with self.runtime.strategy_code():
            for strategy in (self.strategy, self.optimizer_strategy):
                if hasattr(strategy, "close"):
                    strategy.close()


def _step_of_training(model):
    """A stand-in train step: every parameter and floating optimizer tensor changes."""

    def train(step):
        with torch.no_grad():
            for buffer in ddp_buffers(model.chunks):
                buffer.param_data.add_(1)
            for held in holdings([model.optimizer]):
                if held.tensor.is_floating_point():
                    held.tensor.add_(1)
        return None

    return train


def _checkpoint(host):
    """The checkpoint step as the runner takes it (the files are written and removed)."""

    def other(step):
        if step.name == "checkpoint":
            host.written.append(save_and_remove(host.model))

    return other


def _run(runtime, model, params, optimizer, names):
    host = BareHost(runtime, model, params, optimizer)
    steps = Steps(host, names, train=_step_of_training(model), other=_checkpoint(host))
    try:
        completed = steps.run()
    finally:
        host.close()
    return host, steps, completed


@pytest.mark.parametrize(
    ("params", "optimizer"),
    [(name, "none") for name in MODEL_STRATEGIES if name != "lazy"]
    + [("lazy", name) for name in OPTIMIZER_STRATEGIES],
)
def test_every_preset_keeps_the_invariant(runtime, model, params, optimizer):
    for preset in PRESETS:
        host, steps, completed = _run(runtime, model, params, optimizer, parse_sequence(preset))
        assert completed and not host.problems, (preset, host.problems)
        assert steps.on_device and steps.trains == sum(
            s == "train" for s in PRESETS[preset].split(",")
        )
        if params != "none":  # every parameter offload left the buffers freed
            assert host.offloads and all(host.offloads), preset
        assert len(host.written) == PRESETS[preset].split(",").count("checkpoint")


def test_a_stale_load_of_what_is_loaded_is_blamed_on_that_step(runtime, model):
    names = parse_sequence("train,offload,load,train,load,train")
    host, _, completed = _run(runtime, model, BREAKS + "StaleLoad", "none", names)
    assert not completed
    assert host.problems[0].startswith("after step 5, load (second in a row): "), host.problems


def test_steps_say_what_repeats():
    labels = [s.label for s in steps_of(parse_sequence("double-offload"))]
    assert labels[4:7] == [
        "step 5, offload",
        "step 6, offload (second in a row)",
        "step 7, load",
    ]
    (load,) = [s for s in steps_of(parse_sequence("load-without-offload")) if s.number == 2]
    assert load.label == "step 2, load (without an offload)"
    mixed = steps_of(parse_sequence("train,offload-optimizer,offload,load,train"))
    assert mixed[2].label == "step 3, offload (optimizer second in a row)"
