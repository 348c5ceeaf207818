"""Integrity that cannot cancel: structured corruptions and rebound buffers, in CPU emulation.

GIVEN user strategies that corrupt on load in ways the linear fingerprint could not see
(two sign bits in one block, every 4th bf16 weight negated, every odd fp32 ``exp_avg``,
main param or ``master_param`` negated), that negate two unread embedding rows in bf16
and fp32, or that hand ``buffer.param_data`` a new tensor,
WHEN ``offloadprobe run`` measures them (in this process, tiny model, one cycle; without
the no-offload reference run, except for the rows, where the reference runs too),
THEN each run exits 1 with the verdict ``corrupted``, and each corruption has its line
naming the buffer or the optimizer key. A parameter corruption and an optimizer one share
a run (the checks are independent; each is asserted by its own line): four runs, not
seven, for the suite's time.
And on a real model, every view the buffers' layout promises is checked after a load.
"""

from __future__ import annotations

import json

import pytest
import torch

from offloadprobe.cli import main
from tests.conftest import TINY_MODEL

BAD = "tests.integration.corrupting_strategies:"
COMMON = ["run", "--device", "cpu", "--no-progress", "--cycles", "1", *TINY_MODEL]
NO_REFERENCE = "--no-reference-check"
BUFFER_DIFFERS = "cycle 0, buffer 0 (torch.bfloat16): param_data differs from before offload"
VIEWS_OFF = "cycle 0, buffer 0 (torch.bfloat16): 17 of 17 parameters in param_data are not"


def _optimizer_line(key: str) -> str:
    return f"cycle 0: optimizer {key} differs from before offload"


def _pair(model: str, optimizer: str, *more: str) -> list[str]:
    """A corrupting model strategy and a corrupting optimizer strategy, no reference run."""
    return ["--strategy", BAD + model, "--optimizer-strategy", BAD + optimizer, *more, NO_REFERENCE]


RUNS = {
    "sign bits, odd exp_avg": (
        _pair("TwoSignBits", "EveryOddExpAvgNegated"),
        [BUFFER_DIFFERS, _optimizer_line("exp_avg")],
    ),
    "every 4th bf16, odd main params": (
        _pair("EveryFourthWeightNegated", "EveryOddMainParamNegated"),
        [BUFFER_DIFFERS, _optimizer_line("shard_fp32_from_float16_groups")],
    ),
    "param_data rebound, odd master_param": (
        _pair("RebindsParamData", "EveryOddMasterParamNegated", "--precision-aware"),
        [VIEWS_OFF, _optimizer_line("master_param")],
    ),
    "two unread rows, reference on": (
        ["--strategy", BAD + "TwoUnreadRowsNegated"],
        [BUFFER_DIFFERS, _optimizer_line("shard_fp32_from_float16_groups")],
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``run(case) -> (exit code, report, stderr)``, each once."""
    folder = tmp_path_factory.mktemp("integrity")
    cache: dict[str, tuple[int, dict, str]] = {}

    def go(case: str, capsys) -> tuple[int, dict, str]:
        if case not in cache:
            out = folder / f"run-{len(cache)}.json"
            capsys.readouterr()
            try:
                main([*COMMON, "--json", str(out), *RUNS[case][0]])
                code = 0
            except SystemExit as exit_:
                code = int(exit_.code or 0)
            cache[case] = (code, json.loads(out.read_text()), capsys.readouterr().err)
        return cache[case]

    return go


@pytest.mark.parametrize("case", list(RUNS))
def test_each_structured_corruption_is_corrupted_and_exits_1(runs, capsys, case):
    code, report, err = runs(case, capsys)
    assert code == 1, err
    run = report["runs"][0]
    assert run["outcome"]["kind"] == "corrupted", run["outcome"]
    first, second = RUNS[case][1]
    assert run["outcome"]["detail"].startswith(first), run["outcome"]
    assert any(line.startswith(second) for line in run["integrity"]), run["integrity"]
    assert first in err and "Traceback" not in err


def test_a_rebound_param_data_names_the_parameter_and_the_cause(runs, capsys):
    _, report, _ = runs("param_data rebound, odd master_param", capsys)
    first = report["runs"][0]["integrity"][0]
    assert "views another storage (0 bytes: freed)" in first
    assert first.endswith("was buffer.param_data replaced by a new tensor in load?")


# ------------------------------------------------------------------ views, on a real model


@pytest.fixture(scope="module")
def model():
    """A tiny model with the precision-aware optimizer (its params are param_data's views),
    trained one step."""
    from offloadprobe.core.config import ModelConfig, OptimizerChoice
    from offloadprobe.engine.model.builder import build_probe_model
    from offloadprobe.engine.model.train import train_step
    from offloadprobe.engine.runtime import open_runtime

    cfg = ModelConfig(
        num_layers=1,
        hidden_size=128,
        num_attention_heads=4,
        vocab_size=1024,
        seq_length=32,
        micro_batch_size=1,
    )
    with open_runtime("cpu", 3) as runtime:
        built = build_probe_model(
            cfg, runtime, seed=3, optimizer=OptimizerChoice(precision_aware=True)
        )
        train_step(built)
        yield built


def _verify(model, before=None):
    from offloadprobe.engine.model.integrity import fingerprint_state, verify_round_trip

    before = before or fingerprint_state(model)
    return verify_round_trip(model, before, 0, grads_zeroed=False)


def _first_param(model):
    buffer = model.chunks[0].buffers[0]
    return buffer, next(iter(buffer.param_index_map))


def _replace(owner, attr: str):
    """Replace ``owner.attr`` by a copy; returns the undo."""
    old = getattr(owner, attr)
    setattr(owner, attr, old.clone())
    return lambda: setattr(owner, attr, old)


def _a_parameter(model):
    return _replace(_first_param(model)[1], "data")


def _a_main_grad(model):
    return _replace(_first_param(model)[1], "main_grad")


def _a_bucket(model):
    return _replace(_first_param(model)[0].buckets[0], "param_data")


def _an_optimizer_shard(model):
    # what megatron's own optimizer offload does to the precision-aware optimizer's params
    return _replace(model.optimizer.chained_optimizers[0].shard_float16_groups[0][0], "data")


def _the_step_count(model):
    group = model.optimizer.chained_optimizers[0].optimizer.param_groups[0]
    old, group["step"] = group["step"], 0
    return lambda: group.__setitem__("step", old)


TAMPERS = {
    "a parameter's data": (_a_parameter, "1 of 17 parameters in param_data"),
    "a main_grad": (_a_main_grad, "1 of 17 main_grads in grad_data"),
    "a bucket": (_a_bucket, "1 of 1 buckets in param_data"),
    "an optimizer shard": (_an_optimizer_shard, "1 of 17 optimizer shard_float16_groups"),
    "the step count": (_the_step_count, "param group 0 'step' changed in the round trip (1 -> 0)"),
}


def test_an_untouched_model_passes(model):
    assert _verify(model) == []


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_each_view_the_model_computes_with_is_checked(model, tamper):
    from offloadprobe.engine.model.integrity import fingerprint_state

    apply, line = TAMPERS[tamper]
    before = fingerprint_state(model)
    undo = apply(model)
    try:
        problems = _verify(model, before)
    finally:
        undo()
    assert len(problems) == 1 and line in problems[0], problems
    assert _verify(model) == []


def test_every_optimizer_tensor_but_buffer_views_and_main_grads_is_fingerprinted(model):
    from offloadprobe.engine.model.integrity import _optimizer_tensors

    found = _optimizer_tensors(model)
    assert {name.owner for name, _ in found} == {"exp_avg", "exp_avg_sq", "master_param"}
    assert len(found) == 3 * 17 and all(isinstance(t, torch.Tensor) for _, t in found)
    assert len({name.key for name, _ in found}) == len(found)  # each one its own name


# ------------------------------------------------------------------ optimizer state, by name


def _inner(model):
    (part,) = model.optimizer.chained_optimizers
    return part.optimizer


def test_optimizer_state_rebuilt_in_another_order_passes(model):
    # what ``{k: v.to(...) for k, v in reversed(...)}`` in a strategy does: the same
    # tensors, the keys of each state dict and the parameters of the state in other orders
    from offloadprobe.engine.model.integrity import fingerprint_state

    inner = _inner(model)
    before = fingerprint_state(model)
    original = inner.state
    rebuilt = type(original)(dict)
    for param, state in reversed(list(original.items())):
        rebuilt[param] = {key: value for key, value in reversed(list(state.items()))}
    inner.state = rebuilt
    try:
        problems = _verify(model, before)
    finally:
        inner.state = original
    assert problems == []


def test_an_optimizer_tensor_missing_new_or_changed_is_named(model):
    from offloadprobe.engine.model.integrity import fingerprint_state

    inner = _inner(model)
    params = [p for group in inner.param_groups for p in group["params"]]
    before = fingerprint_state(model)
    dropped = inner.state[params[3]].pop("exp_avg")
    inner.state[params[4]]["extra"] = torch.zeros(2)
    changed = inner.state[params[5]]["exp_avg_sq"]
    old = changed.clone()
    changed.view(-1)[0] += 1
    try:
        problems = _verify(model, before)
    finally:
        inner.state[params[3]]["exp_avg"] = dropped
        del inner.state[params[4]]["extra"]
        changed.copy_(old)
    assert len(problems) == 3, problems
    missing, new, differs = problems
    assert missing.startswith("cycle 0: optimizer exp_avg of param 3 (")
    assert missing.endswith(") missing after load")
    assert new.startswith("cycle 0: optimizer extra of param 4 (")
    assert new.endswith(") appeared in the round trip (not held before offload)")
    expected = "cycle 0: optimizer exp_avg_sq differs from before offload in 1 tensor(s): param 5 ("
    assert differs.startswith(expected)
    assert _verify(model) == []
