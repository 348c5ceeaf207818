"""A second engine through the real runner: a plain ``torch.nn`` model with AdamW
(``tests/fake_engine.py``), in CPU emulation. The harness reads only the engine's
inventory, so what megatron's walks would not see (no DDP buffers, a plain torch
optimizer) is judged all the same: a corrupted weight is corrupted, a strategy that moves
nothing is not offloaded, an optimizer strategy with no optimizer state is bad input.
The truth is the strategies' own doing (one weight changed; nothing moved), never a
figure read from the record under test."""

from __future__ import annotations

import pytest

from offloadprobe.core.config import ModelConfig, RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.verdicts import judge
from offloadprobe.engine.runner import run_cycles
from offloadprobe.engine.runtime import open_runtime
from tests.fake_engine import build_fake_state, build_without_optimizer

SPEC = "tests.fake_engine:"


def _run(strategy: str, build=build_fake_state, optimizer_strategy: str = "none"):
    cfg = RunConfig(
        model=ModelConfig(),
        strategy=SPEC + strategy,
        optimizer_strategy=optimizer_strategy,
        cycles=1,
        device="cpu",
        reference_check=False,
    )
    with open_runtime(cfg.device, cfg.seed) as runtime:
        return run_cycles(cfg, runtime, build_state=build)


@pytest.fixture(scope="module")
def honest():
    return _run("ToHost")


def test_an_honest_strategy_of_the_second_engine_passes(honest):
    verdict, _ = judge(honest)
    assert verdict.kind == "ok" and verdict.exit_code == 0, verdict
    (fact,) = honest.residency
    assert fact.roles["param"] == "parameters" and fact.roles["exp_avg"] == "optimizer state"
    assert fact.param_bytes_to_move == (64 * 128 + 128 + 128 * 64 + 64) * 4


def test_a_strategy_that_corrupts_one_weight_is_corrupted_exit_1():
    verdict, _ = judge(_run("CorruptsOneWeight"))
    assert verdict.kind == "corrupted" and verdict.exit_code == 1, verdict
    assert verdict.detail.startswith("cycle 0, 0.weight (torch.float32): param differs")


def test_a_strategy_that_moves_nothing_is_not_offloaded_exit_1():
    verdict, _ = judge(_run("MovesNothing"))
    assert verdict.kind == "not offloaded" and verdict.exit_code == 1, verdict
    assert verdict.detail.startswith("param 64.75 KiB still on device after offload"), verdict


def test_an_optimizer_strategy_without_optimizer_state_is_bad_input_exit_2():
    with pytest.raises(UsageError) as raised:
        _run("ToHost", build_without_optimizer, optimizer_strategy="complete")
    assert raised.value.exit_code == 2
    message = str(raised.value)
    assert "\n" not in message and "holds none" in message, message
