"""The reference check's optimizer lines (engine.model.reference) on hand-built
checkpoints, and the non-finite count (engine.model.finite)."""

import dataclasses

import pytest
import torch

from offloadprobe.engine.model.finite import nonfinite_counts
from offloadprobe.engine.model.integrity import HeldName
from offloadprobe.engine.model.reference import Checkpoint, differences


def _name(owner: str, param: str = "param 0") -> HeldName:
    return HeldName(owner=owner, param=param, label="")


def _point(**optimizer: tuple[int, ...]) -> Checkpoint:
    return Checkpoint(
        loss=1.0, fingerprints=[(1, 2, 3)], optimizer=[(_name(k), v) for k, v in optimizer.items()]
    )


def test_optimizer_state_is_compared_with_the_reference_by_name():
    want = _point(exp_avg=(1,), exp_avg_sq=(2,), step=(3,))
    got = Checkpoint(
        loss=1.0,
        fingerprints=[(1, 2, 3)],
        optimizer=[(_name("exp_avg_sq"), (9,)), (_name("step"), (3,)), (_name("extra"), (4,))],
    )
    assert differences("after step 1", got, want) == [
        "after step 1: optimizer exp_avg of param 0 missing (the no-offload run's has it)",
        "after step 1: optimizer extra of param 0 is not in the no-offload run's",
        "after step 1: optimizer exp_avg_sq differs from the no-offload run's in 1 tensor(s): "
        "param 0",
    ]
    assert differences("after step 1", want, want) == []


def test_a_param_group_value_is_compared_with_the_reference():
    want = Checkpoint(loss=1.0, fingerprints=[], groups=[("optimizer 0 param group 0 'lr'", "1")])
    got = dataclasses.replace(want, groups=[("optimizer 0 param group 0 'lr'", "2")])
    assert differences("x", got, want) == [
        "x: optimizer 0 param group 0 'lr' differs from the no-offload run's (1 -> 2)"
    ]


@pytest.mark.parametrize(
    ("values", "count"),
    [([0.0, 1.0], 0), ([float("inf"), 1.0], 1), ([float("nan"), float("-inf")], 2)],
)
def test_non_finite_values_are_counted(values, count):
    assert nonfinite_counts([torch.tensor(values), torch.arange(3)]) == [count, 0]


def test_a_param_group_object_shown_by_its_address_is_no_difference():
    label = "optimizer 0 param group 0 'hook'"
    want = Checkpoint(loss=1.0, fingerprints=[], groups=[(label, "<F object at 0x7f01>")])
    got = dataclasses.replace(want, groups=[(label, "<F object at 0x7f02>")])
    assert differences("x", got, want) == []
