"""judge(): one verdict per row from what the run recorded and the budgets (fakes)."""

import dataclasses

import pytest

from offloadprobe.core.budgets import parse_host_peak
from offloadprobe.core.records import ChildFailure, Verdict
from offloadprobe.core.verdicts import exit_code, judge
from tests.unit.test_budgets import run


def test_ok_within_budget():
    verdict, breaches = judge(run("lazy", peak_x=1.0), [parse_host_peak("1.1x")])
    assert verdict.ok and verdict.line() == "ok" and breaches == []


def test_over_budget_names_the_figure():
    verdict, breaches = judge(run("naive", peak_x=4.2), [parse_host_peak("1.7x")])
    assert verdict.line() == "over budget: host peak 4.20x > 1.70x"
    assert [b.strategy for b in breaches] == ["naive + none"]


def test_corruption_beats_budgets():
    broken = dataclasses.replace(run(peak_x=9.0), integrity=["cycle 0: buffer 0 differs"])
    verdict, breaches = judge(broken, [parse_host_peak("1.1x")])
    assert verdict.kind == "corrupted" and "buffer 0 differs" in verdict.line()
    assert breaches == []


def test_not_offloaded():
    skipped = dataclasses.replace(run(peak_x=0.0), not_offloaded=["param_data 1 GiB left"])
    verdict, _ = judge(skipped, [parse_host_peak("1.1x")])
    assert verdict.line() == "not offloaded: param_data 1 GiB left"


def test_out_of_memory_names_phase_and_cycle():
    oom = dataclasses.replace(
        run(), summary=None, failure="CUDA out of memory (cycle 1, phase load)",
        failure_kind="out of memory", failure_cycle=1, failure_phase="load",
    )  # fmt: skip
    verdict, _ = judge(oom)
    assert (verdict.kind, verdict.cycle, verdict.phase) == ("out of memory", 1, "load")
    assert verdict.line() == "out of memory: CUDA out of memory (cycle 1, phase load)"


def test_child_failure_without_record():
    killed = ChildFailure(kind="killed", message="SIGKILL, cgroup OOM", exit_code=-9)
    verdict, _ = judge(None, failure=killed)
    assert verdict.line() == "killed: SIGKILL, cgroup OOM" and verdict.exit_code == 1


@pytest.mark.parametrize(
    ("kinds", "code"),
    [(["ok", "ok"], 0), (["ok", "over budget"], 1), (["killed", "killed"], 1),
     (["crashed", "bad input"], 2), ([], 0)],
)  # fmt: skip
def test_exit_code(kinds, code):
    assert exit_code([Verdict(kind=k) for k in kinds]) == code


def test_unknown_kind_is_a_bug():
    with pytest.raises(ValueError, match="unknown verdict kind"):
        Verdict(kind="fine")
