"""Optimizer-state offload on real megatron-core objects, in CPU emulation.

GIVEN a tiny GPT (one layer) + DDP + DistributedOptimizer (classic AdamW, or the precision-aware
optimizer with its ``master_param`` state) trained one step,
WHEN an optimizer strategy offloads and loads it,
THEN every optimizer tensor comes back bit for bit, training continues exactly as in a
model that never offloaded, and the residency audit names what the offload left behind.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.engine.model.audit import (
    audit,
    bytes_by_key,
    optimizer_state_bytes_by_key,
    snapshot_device_storage,
)
from offloadprobe.engine.model.builder import build_probe_model
from offloadprobe.engine.model.train import train_step
from offloadprobe.engine.optimizer.holdings import holdings
from offloadprobe.engine.optimizer.strategies import optimizer_strategy
from offloadprobe.engine.runtime import open_runtime
from offloadprobe.engine.strategies import model_strategy

TINY = ModelConfig(
    num_layers=1,
    hidden_size=64,
    num_attention_heads=4,
    vocab_size=256,
    seq_length=16,
    micro_batch_size=1,
)
SEED = 7
USER = "tests.integration.user_optimizer_offload:VerlOffload"
USER_PRE_FIX = "tests.integration.user_optimizer_offload:VerlOffloadPreFix"
STRATEGIES = ["legacy", "fixed", "complete", "none", USER]
MODES = {
    "classic": OptimizerChoice(),
    "precision-aware": OptimizerChoice(precision_aware=True),
    "precision-aware-low": OptimizerChoice(
        precision_aware=True,
        exp_avg_dtype="bf16",
        exp_avg_sq_dtype="uint8",
        store_param_remainders=True,
    ),
}
STEPS = 3
"""Train steps per run; the round trips happen between them."""


@pytest.fixture(scope="module")
def runtime():
    with open_runtime("cpu", SEED) as rt:
        yield rt


@pytest.fixture(scope="module")
def reference(runtime):
    """Per mode: the losses and final param bytes of a model that never offloads."""
    out = {}
    for mode, choice in MODES.items():
        model = build_probe_model(TINY, runtime, seed=SEED, optimizer=choice)
        losses = [train_step(model) for _ in range(STEPS)]
        out[mode] = (losses, _param_bytes(model))
    return out


def _param_bytes(model) -> list[torch.Tensor]:
    return [b.param_data.clone() for b in model.buffers()]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _optimizer_values(model) -> list[tuple[str, torch.Tensor]]:
    """Every tensor the optimizer holds, in a fixed order, copied."""
    return [(h.owner, h.tensor.detach().clone()) for h in holdings([model.optimizer])]


def _assert_identical(before, after) -> None:
    assert [o for o, _ in before] == [o for o, _ in after]
    for (owner, old), (_, new) in zip(before, after, strict=True):
        assert old.dtype == new.dtype and old.shape == new.shape, owner
        assert torch.equal(_bits(old), _bits(new)), f"{owner} changed in the round trip"


def _cycle(runtime, model, strategy, model_strategy=None):
    """One offload (model first, as verl does) + audit + load; returns the resident records."""
    snapshot = snapshot_device_storage(model)
    if model_strategy is not None:
        model_strategy.offload(model.chunks)
    strategy.offload([model.optimizer])
    runtime.settle()  # device storages nothing references any more are freed, as on a GPU
    records = audit(model, runtime, snapshot)
    strategy.load([model.optimizer])
    if model_strategy is not None:
        model_strategy.load(model.chunks)
    return records


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("spec", STRATEGIES)
def test_round_trip_is_bit_exact_and_training_continues_identically(runtime, reference, mode, spec):
    # GIVEN a model trained one step, and the reference that never offloads
    model = build_probe_model(TINY, runtime, seed=SEED, optimizer=MODES[mode])
    strategy = optimizer_strategy(spec).build(runtime)
    losses = [train_step(model)]
    # WHEN the optimizer state goes to the host and back before each further step
    for _ in range(STEPS - 1):
        before = _optimizer_values(model)
        _cycle(runtime, model, strategy)
        _assert_identical(before, _optimizer_values(model))
        losses.append(train_step(model))
    # THEN the run is indistinguishable from the reference
    ref_losses, ref_params = reference[mode]
    assert losses == ref_losses
    for mine, theirs in zip(_param_bytes(model), ref_params, strict=True):
        assert torch.equal(_bits(mine), _bits(theirs))
    if hasattr(strategy, "close"):
        strategy.close()


@pytest.fixture(scope="module")
def audits(runtime):
    """Per (mode, strategy): the audit after a full offload (model 'pageable' + optimizer)."""
    out = {}
    for mode in ("classic", "precision-aware", "precision-aware-low"):
        for spec in [*STRATEGIES, USER_PRE_FIX]:
            model = build_probe_model(TINY, runtime, seed=SEED, optimizer=MODES[mode])
            train_step(model)
            strategy = optimizer_strategy(spec).build(runtime)
            records = _cycle(runtime, model, strategy, model_strategy("pageable").build(runtime))
            out[mode, spec] = (model, records)
    return out


def test_legacy_leaves_exactly_the_fp32_master_weights_behind(audits):
    model, records = audits["precision-aware", "legacy"]
    left = bytes_by_key(records)
    assert left == {"master_param": 4 * model.param_count}  # one rank: the shard is everything
    assert {r.dtype for r in records} == {"float32"}
    named = {r.param_name for r in records}
    assert None not in named
    assert "decoder.layers.0.mlp.linear_fc1.weight" in named
    assert len(named) == len(list(model.chunks[0].parameters()))


def test_legacy_leaves_the_int16_remainders_with_low_precision_moments(audits):
    model, records = audits["precision-aware-low", "legacy"]
    left = bytes_by_key(records)
    assert left["master_param"] == 2 * model.param_count
    assert {r.dtype for r in records if r.owner == "master_param"} == {"int16"}


@pytest.mark.parametrize("mode", ["classic", "precision-aware"])
@pytest.mark.parametrize("spec", ["fixed", "complete", USER])
def test_fixed_complete_and_verl_fix_leave_no_optimizer_state(audits, mode, spec):
    _, records = audits[mode, spec]
    assert records == []


def test_only_complete_moves_the_fp8_and_fp16_state_scales(audits):
    # TE (and PrecisionAwareAdam) keep one fp32 scale per scaled state, outside the state
    # dict; verl's fix moves state keys only.
    _, fixed = audits["precision-aware-low", "fixed"]
    assert set(bytes_by_key(fixed)) == {"exp_avg_sq.scale"}
    assert {r.nbytes for r in fixed} == {4}
    _, complete = audits["precision-aware-low", "complete"]
    assert complete == []


@pytest.mark.parametrize("mode", list(MODES))
def test_none_leaves_every_optimizer_byte(audits, mode):
    model, records = audits[mode, "none"]
    assert bytes_by_key(records) == optimizer_state_bytes_by_key(model)
    assert all(r.referenced for r in records)


def test_user_pre_fix_function_is_caught_like_legacy(audits):
    model, records = audits["precision-aware", USER_PRE_FIX]
    assert bytes_by_key(records) == {"master_param": 4 * model.param_count}


def test_optimizer_state_bytes_per_key(audits):
    model, _ = audits["classic", "none"]
    n = model.param_count
    expected = {"exp_avg": 4 * n, "exp_avg_sq": 4 * n, "shard_fp32_from_float16_groups": 4 * n}
    assert optimizer_state_bytes_by_key(model) == expected
    model, _ = audits["precision-aware-low", "none"]
    totals = optimizer_state_bytes_by_key(model)
    assert {k: totals[k] for k in ("exp_avg", "exp_avg_sq", "master_param")} == {
        "exp_avg": 2 * n,
        "exp_avg_sq": n,
        "master_param": 2 * n,
    }


def test_without_a_model_strategy_the_ddp_buffers_are_reported_once(runtime):
    model = build_probe_model(TINY, runtime, seed=SEED, optimizer=MODES["precision-aware"])
    train_step(model)
    records = _cycle(runtime, model, optimizer_strategy("complete").build(runtime))
    left = bytes_by_key(records)
    assert left == {"param_data": model.payload_bytes, "grad_data": model.grad_bytes}
    aliases = [r for r in records if r.alias_of is not None]
    assert aliases and {(r.owner, r.alias_of) for r in aliases} == {
        ("main_param.decoupled_grad", "grad_data")
    }


def test_complete_reuses_its_exact_size_host_buffers(runtime):
    model = build_probe_model(TINY, runtime, seed=SEED, optimizer=MODES["precision-aware-low"])
    train_step(model)
    strategy = optimizer_strategy("complete").build(runtime)
    _cycle(runtime, model, strategy)
    hosts = {key: slot.host for key, slot in strategy._slots.items()}
    train_step(model)
    _cycle(runtime, model, strategy)
    assert hosts.keys() == strategy._slots.keys()
    assert all(strategy._slots[k].host is host for k, host in hosts.items())
    total = sum(optimizer_state_bytes_by_key(model).values())
    assert sum(host.numel() for host in hosts.values()) == total
    assert strategy.registered_bytes == 0  # nothing to page-lock without CUDA
    strategy.close()
