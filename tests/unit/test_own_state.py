"""What the optimizer holds itself (``engine/optimizer/own_state.py``): its state as its
own step made it, at the sizes it made it; what a strategy hangs off it is none of it."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from offloadprobe.engine.optimizer.own_state import OwnState


def _optimizer():
    """A megatron-shaped optimizer (the inner torch optimizer as ``.optimizer``) over two
    fp32 main parameters, with one fp32 group as the DistributedOptimizer keeps them."""
    mains = [torch.zeros(64, requires_grad=True), torch.zeros(32, requires_grad=True)]
    inner = torch.optim.AdamW(mains, lr=0.1)
    return SimpleNamespace(optimizer=inner, shard_fp32_groups=[[torch.zeros(8)]]), mains


def _step(megatron, mains) -> None:
    for p in mains:
        p.grad = torch.ones_like(p)
    megatron.optimizer.step()


def _own(own: OwnState, megatron) -> dict[str, int]:
    found: dict[str, int] = {}
    for held in own.own(megatron):
        found[held.owner] = found.get(held.owner, 0) + held.tensor.numel()
    return found


def test_the_optimizer_s_step_makes_its_state_and_a_strategy_s_tensor_is_not_its():
    megatron, mains = _optimizer()
    own = OwnState()
    own.record(megatron)  # after the build: the fp32 group only
    own.note_foreign(megatron)  # the strategies are built: nothing new
    before = own.before_train(megatron)
    _step(megatron, mains)
    own.after_train(megatron, before)
    made = {"shard_fp32_groups": 8, "step": 2, "exp_avg": 96, "exp_avg_sq": 96}
    made["main_param.grad"] = 96
    assert _own(own, megatron) == made
    state = megatron.optimizer.state[mains[0]]
    # what a strategy hangs off the optimizer at an offload: never the optimizer's
    state["stash"] = torch.zeros(64)  # a key the optimizer never made
    mains[1].decoupled_grad = torch.zeros(32)  # a main parameter's attribute
    assert _own(own, megatron) == made
    assert {h.owner for h in own.not_own(megatron)} == {"stash", "main_param.decoupled_grad"}
    # nor at the next train step: only what a train step makes is the optimizer's
    before = own.before_train(megatron)
    _step(megatron, mains)
    own.after_train(megatron, before)
    assert _own(own, megatron) == made


def test_a_tensor_larger_than_the_optimizer_made_under_its_key_is_not_its():
    megatron, mains = _optimizer()
    own = OwnState()
    own.record(megatron)
    before = own.before_train(megatron)
    _step(megatron, mains)
    own.after_train(megatron, before)
    state = megatron.optimizer.state[mains[0]]
    state["exp_avg"] = torch.cat([state["exp_avg"], torch.zeros(64)])  # a copy beside it
    assert _own(own, megatron)["exp_avg"] == 32  # the second parameter's only
    state["exp_avg"] = state["exp_avg"][:64].clone()  # back to the size it made: its own
    assert _own(own, megatron)["exp_avg"] == 96


def test_what_the_strategies_hung_while_built_is_never_the_optimizer_s():
    megatron, mains = _optimizer()
    own = OwnState()
    own.record(megatron)
    mains[0].decoupled_grad = torch.zeros(64)  # made at construction, before any step
    own.note_foreign(megatron)
    before = own.before_train(megatron)
    _step(megatron, mains)
    own.after_train(megatron, before)
    assert "main_param.decoupled_grad" not in _own(own, megatron)
    assert [h.owner for h in own.not_own(megatron)] == ["main_param.decoupled_grad"]
