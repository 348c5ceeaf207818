"""The verdict rules (core.verdicts), each a pure function, on hand-built facts."""

import dataclasses
import signal

import pytest

from offloadprobe.core.budgets import parse_host_peak
from offloadprobe.core.outcomes import Failure, Verdict
from offloadprobe.core.records import ResidencyFact
from offloadprobe.core.verdicts import (
    cycle_residency_problems,
    ended,
    exit_code,
    judge,
    residency_problems,
)
from tests.unit.test_budgets import run

MiB = 2**20


def fact(**changes) -> ResidencyFact:
    """An honest offload of 16 MiB of parameters: gave them all back, left nothing."""
    base = ResidencyFact(
        cycle=0,
        param_bytes_to_move=16 * MiB,
        param_bytes_left=0,
        param_offload_gave_bytes=16 * MiB,
        built_on_device_bytes=0,
        moves_optimizer=False,
        optimizer_state_bytes=96 * MiB,
        optimizer_moved_bytes=0,
    )
    return dataclasses.replace(base, **changes)


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


def test_an_honest_offload_has_no_residency_problem():
    assert cycle_residency_problems(fact()) == []


def test_param_data_left_on_the_device_is_not_offloaded():
    skipped = dataclasses.replace(run(peak_x=0.0), residency=[fact(param_bytes_left=16 * MiB)])
    verdict, _ = judge(skipped, [parse_host_peak("1.1x")])
    assert verdict.line() == "not offloaded: param_data 16.00 MiB still on device after offload"
    assert verdict.reasons == ("param_data 16.00 MiB still on device after offload",)


def test_a_copy_kept_on_the_device_is_not_offloaded():
    """param_data freed, but the device gave back less than half of it."""
    lines = cycle_residency_problems(fact(param_offload_gave_bytes=7 * MiB))
    assert lines == [
        "param_data freed, but the device gave back 7.00 MiB net of 16.00 MiB "
        "(a copy kept on the device?)"
    ]


def test_a_staging_buffer_kept_for_reuse_passes():
    """Half or more came back: a reused staging buffer, not a kept copy."""
    assert cycle_residency_problems(fact(param_offload_gave_bytes=8 * MiB)) == []


def test_device_memory_the_strategy_built_cannot_pay_for_parameters():
    lines = cycle_residency_problems(
        fact(param_offload_gave_bytes=16 * MiB, built_on_device_bytes=16 * MiB)
    )
    assert lines and "less 16.00 MiB the strategy holds otherwise" in lines[0]


def test_optimizer_state_moved_in_the_same_phase_cannot_pay_for_parameters():
    lines = cycle_residency_problems(
        fact(param_offload_gave_bytes=16 * MiB, optimizer_moved_bytes=16 * MiB)
    )
    assert lines and "param_data freed" in lines[0]


def test_an_optimizer_strategy_that_moved_nothing():
    lines = cycle_residency_problems(fact(moves_optimizer=True, optimizer_moved_bytes=0))
    assert lines == ["optimizer state 96.00 MiB: none of it left the device"]


def test_residency_problems_of_several_cycles_say_each_line_once():
    stuck = fact(param_bytes_left=16 * MiB)
    assert len(residency_problems([stuck, dataclasses.replace(stuck, cycle=1)])) == 1


def test_out_of_memory_names_phase_and_cycle():
    failure = Failure(kind="out of memory", message="CUDA out of memory", cycle=1, phase="load")
    oom = dataclasses.replace(run(), summary=None, failure=failure)
    verdict, _ = judge(oom)
    assert (verdict.kind, verdict.cycle, verdict.phase) == ("out of memory", 1, "load")
    assert verdict.line() == "out of memory: CUDA out of memory (cycle 1, phase load)"


def test_how_the_process_ended_beats_its_record():
    killed = Failure(kind="killed", message="SIGKILL, cgroup OOM", exit_code=-9)
    verdict, _ = judge(run(), failure=killed)
    assert verdict.line() == "killed: SIGKILL, cgroup OOM" and verdict.exit_code == 1


def test_a_process_that_exits_without_its_record_exited_early():
    failure = ended(
        exit_code=0,
        wrote_result=False,
        result_exit_code=None,
        result_failure=None,
        last_phase=(0, "load"),
    )
    assert failure is not None and failure.kind == "exited early"
    assert (failure.cycle, failure.phase) == (0, "load")
    assert Verdict(kind=failure.kind).exit_code == 1


def test_a_signal_is_a_kill_with_the_cgroup_s_word_on_oom():
    failure = ended(
        exit_code=-signal.SIGKILL,
        wrote_result=False,
        result_exit_code=None,
        result_failure=None,
        last_phase=(1, "offload"),
        oom_kills=(0, 1),
    )
    assert failure.kind == "killed" and "cgroup OOM (oom_kill 0 -> 1)" in failure.message
    term = ended(
        exit_code=-signal.SIGTERM,
        wrote_result=False,
        result_exit_code=None,
        result_failure=None,
        last_phase=None,
    )
    assert term.message == "signal 15 (SIGTERM)"


def test_a_record_the_exit_status_contradicts_is_inconsistent():
    failure = ended(
        exit_code=0, wrote_result=True, result_exit_code=1, result_failure=None, last_phase=None
    )
    assert failure is not None and failure.kind == "inconsistent"


def test_a_consistent_record_is_judged_by_its_facts():
    assert (
        ended(
            exit_code=1, wrote_result=True, result_exit_code=1, result_failure=None, last_phase=None
        )
        is None
    )


@pytest.mark.parametrize(
    ("kinds", "code"),
    [
        (["ok", "ok"], 0),
        (["ok", "over budget"], 1),
        (["killed", "killed"], 1),
        (["crashed", "bad input"], 2),
        (["exited early"], 1),
        (["inconsistent"], 1),
        ([], 0),
    ],
)
def test_exit_code(kinds, code):
    assert exit_code([Verdict(kind=k) for k in kinds]) == code


def test_an_expected_failure_keeps_exit_code_0_and_says_so():
    canary = Verdict(kind="over budget", detail="host peak 4.20x > 1.10x", expected=True)
    assert canary.exit_code == 0 and canary.line().endswith("(as expected)")
