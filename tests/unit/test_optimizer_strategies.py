"""Optimizer strategies, the optimizer choice and the residency audit on a hand-built optimizer.

The fake below has the attributes megatron's DistributedOptimizer exposes to offload code
(``optimizer``, fp32 groups, ``buffers``, model/shard groups) around a real Adam, so each
rule can be checked exactly: own-storage grads, unknown state keys, state scales, views
into DDP buffers, torch's host-side ``step``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from offloadprobe.core.config import OptimizerChoice
from offloadprobe.core.errors import StrategyError, UsageError
from offloadprobe.engine.model.audit import audit, bytes_by_key, snapshot_device_storage
from offloadprobe.engine.optimizer.build import adam_class
from offloadprobe.engine.optimizer.holdings import holdings, megatron_optimizers
from offloadprobe.engine.optimizer.precision_adam import PrecisionAwareAdam
from offloadprobe.engine.optimizer.strategies import (
    OPTIMIZER_STRATEGIES,
    optimizer_strategy,
)
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.runtime.emulation import emulated_device

EMULATED = Runtime(device="cpu", emulated=True, note=None)
SHAPES = [(4, 8), (16,)]


@pytest.fixture(autouse=True)
def device():
    """The emulated device: tensors made on "cuda" below are device memory by fact."""
    with emulated_device() as memory:
        yield memory


def _fake_model(precision_aware: bool):
    """One bf16 DDP buffer, two params; Adam over their shards as megatron wires it."""
    numel = sum(torch.Size(s).numel() for s in SHAPES)
    gen = torch.Generator().manual_seed(0)
    param_data = torch.randn(numel, generator=gen).to(torch.bfloat16).cuda()
    grad_data = torch.randn(numel, generator=gen).cuda()
    views, start = [], 0
    for shape in SHAPES:
        size = torch.Size(shape).numel()
        views.append(torch.nn.Parameter(param_data[start : start + size].view(shape)))
        start += size
    shards = [v.detach().view(-1) for v in views]
    grads = [grad_data[: s.numel()].clone().to(torch.bfloat16) for s in shards]  # own storage
    if precision_aware:
        main = shards
        inner = PrecisionAwareAdam(
            main, master_weights=True, use_decoupled_grad=True, exp_avg_sq_dtype=torch.float16
        )
        for shard, grad in zip(main, grads, strict=True):
            shard.decoupled_grad = grad
        fp32_from_float16 = [[None] * len(shards)]
    else:
        main = [s.clone().float() for s in shards]
        inner = torch.optim.AdamW(main, lr=1e-3)
        for shard, grad in zip(main, grads, strict=True):
            shard.grad = grad.float()
        fp32_from_float16 = [main]
    inner.step()
    # a key no strategy knows by name
    inner.state[main[0]]["future_key"] = torch.arange(5.0, device="cuda")
    buffer = SimpleNamespace(param_data=param_data, grad_data=grad_data)
    optimizer = SimpleNamespace(
        optimizer=inner,
        buffers=[buffer],
        shard_fp32_from_float16_groups=fp32_from_float16,
        shard_fp32_groups=[[]],
        shard_float16_groups=[shards],
        model_float16_groups=[views],
        model_fp32_groups=[[]],
    )
    chunk = SimpleNamespace(
        buffers=[buffer],
        expert_parallel_buffers=[],
        named_parameters=lambda: [(f"module.module.w{i}", v) for i, v in enumerate(views)],
    )
    return SimpleNamespace(
        chunks=[chunk], optimizer=SimpleNamespace(chained_optimizers=[optimizer])
    )


def _values(model) -> list[tuple[str, torch.Tensor]]:
    return [(h.owner, h.tensor.detach().clone()) for h in holdings([model.optimizer])]


# ---- registry and choice -----------------------------------------------------------------


def test_builtin_names_and_unknown_name_lists_them():
    assert OPTIMIZER_STRATEGIES.names()[:4] == ["legacy", "fixed", "complete", "none"]
    with pytest.raises(StrategyError) as info:
        optimizer_strategy("complet")
    for name in ("legacy", "fixed", "complete", "none", "package.module:object"):
        assert name in str(info.value)


def test_user_spec_errors_name_the_optimizer_flag(tmp_path, monkeypatch):
    (tmp_path / "half_opt.py").write_text("class Half:\n    def offload(self, o):\n        pass\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StrategyError, match="--optimizer-strategy 'half_opt:Half' lacks load"):
        optimizer_strategy("half_opt:Half")
    with pytest.raises(StrategyError, match="cannot import 'no_such_opt_xyz'"):
        optimizer_strategy("no_such_opt_xyz:S").build(EMULATED)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision_aware": True, "exp_avg_dtype": "fp8"}, "--exp-avg-dtype 'fp8'"),
        ({"exp_avg_sq_dtype": "bf16"}, "add --precision-aware"),
        ({"store_param_remainders": True}, "add --precision-aware"),
        ({"lr": 0.0}, "learning rate"),
        ({"adam_beta2": 1.0}, "beta1, beta2"),
    ],
)
def test_optimizer_choice_refuses_what_cannot_work(kwargs, message):
    with pytest.raises(UsageError, match=message) as info:
        OptimizerChoice(**kwargs)
    assert "\n" not in str(info.value)


def test_optimizer_choice_accepts_every_state_dtype():
    for dtype in ("fp32", "bf16", "fp16", "uint8"):
        choice = OptimizerChoice(precision_aware=True, exp_avg_dtype=dtype, exp_avg_sq_dtype=dtype)
        assert adam_class(choice) is not None
    assert adam_class(OptimizerChoice()) is None


# ---- complete --------------------------------------------------------------------------


@pytest.mark.parametrize("precision_aware", [False, True])
def test_complete_frees_every_optimizer_storage_and_restores_it_in_place(precision_aware):
    model = _fake_model(precision_aware)
    (part,) = megatron_optimizers([model.optimizer])
    ddp = {
        t.untyped_storage()._cdata for t in (part.buffers[0].param_data, part.buffers[0].grad_data)
    }
    before = _values(model)
    tensors = [h.tensor for h in holdings([model.optimizer])]
    strategy = optimizer_strategy("complete").build(EMULATED)
    for _ in range(2):
        strategy.offload([model.optimizer])
        for held in holdings([model.optimizer]):
            storage = held.tensor.untyped_storage()
            if storage._cdata in ddp or held.host_by_design:
                assert storage.nbytes() > 0, held.owner  # the model strategy's, or torch's
            else:
                assert storage.nbytes() == 0, held.owner
        hosts = [slot.host for slot in strategy._slots.values()]
        strategy.load([model.optimizer])
        assert [h.tensor for h in holdings([model.optimizer])] == tensors  # same objects
        for (owner, old), (_, new) in zip(before, _values(model), strict=True):
            assert torch.equal(old, new), owner
    assert [slot.host for slot in strategy._slots.values()] == hosts  # reused, not reallocated
    owners = {h.owner for h in holdings([model.optimizer])}
    assert "future_key" in owners
    assert ("main_param.decoupled_grad" if precision_aware else "main_param.grad") in owners
    strategy.close()
    assert strategy._slots == {} and strategy.registered_bytes == 0


def test_complete_leaves_torch_host_step_alone():
    model = _fake_model(precision_aware=False)
    strategy = optimizer_strategy("complete").build(EMULATED)
    strategy.offload([model.optimizer])
    steps = [h for h in holdings([model.optimizer]) if h.owner == "step"]
    assert steps and all(h.host_by_design and h.tensor.untyped_storage().nbytes() for h in steps)
    strategy.load([model.optimizer])


# ---- audit -----------------------------------------------------------------------------


def test_audit_names_owners_params_and_counts_each_storage_once():
    model = _fake_model(precision_aware=True)
    snapshot = snapshot_device_storage(model)
    records = audit(model, EMULATED, snapshot)  # nothing offloaded: everything is resident
    left = bytes_by_key(records)
    numel = sum(torch.Size(s).numel() for s in SHAPES)
    assert left["param_data"] == 2 * numel and left["grad_data"] == 4 * numel
    assert left["master_param"] == 4 * numel and left["exp_avg_sq"] == 2 * numel
    assert left["main_param.decoupled_grad"] == 2 * numel  # own storage: counted
    assert left["exp_avg_sq.scale"] == 4 * len(SHAPES) and left["future_key"] == 20
    names = {r.param_name for r in records if r.owner == "master_param"}
    assert names == {"w0", "w1"}


def test_audit_after_complete_finds_only_the_ddp_buffers():
    model = _fake_model(precision_aware=True)
    snapshot = snapshot_device_storage(model)
    strategy = optimizer_strategy("complete").build(EMULATED)
    strategy.offload([model.optimizer])
    assert set(bytes_by_key(audit(model, EMULATED, snapshot))) == {"param_data", "grad_data"}
    strategy.load([model.optimizer])


class _KeepsDeviceCopy:
    """Replaces exp_avg with a host copy but keeps the device tensor alive."""

    def __init__(self):
        self.kept = []

    def offload(self, optimizers):
        for part in megatron_optimizers(optimizers):
            for state in part.optimizer.state.values():
                self.kept.append(state["exp_avg"])
                state["exp_avg"] = state["exp_avg"].cpu()

    def load(self, optimizers):
        self.kept.clear()


def test_audit_reports_device_storage_a_strategy_kept_but_detached():
    model = _fake_model(precision_aware=True)
    snapshot = snapshot_device_storage(model)
    leaky = _KeepsDeviceCopy()
    leaky.offload([model.optimizer])
    detached = [r for r in audit(model, EMULATED, snapshot) if not r.referenced]
    assert {r.owner for r in detached} == {"exp_avg"}
    assert {r.param_name for r in detached} == {"w0", "w1"}
    leaky.load([model.optimizer])  # once released (and freed at the phase boundary) ...
    EMULATED.settle()
    # ... nothing is left to report
    assert all(r.referenced for r in audit(model, EMULATED, snapshot))


def test_audit_on_cuda_reads_is_cuda_not_the_snapshot():
    model = _fake_model(precision_aware=True)
    cuda_runtime = Runtime(device="cuda", emulated=False, note=None)
    assert audit(model, cuda_runtime, snapshot_device_storage(model)) == []  # host tensors
