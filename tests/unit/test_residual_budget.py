"""``--max-gpu-residual`` against what each offload was to move (core.residual), on
hand-built records: exact bytes, every cycle judged, nothing let off but what stayed by
design."""

from __future__ import annotations

import dataclasses

from offloadprobe.core.option_budgets import budgets_from_flags
from offloadprobe.core.readings import GpuReading, HostReading
from offloadprobe.core.records import PhaseRecord, ResidencyFact
from offloadprobe.core.verdicts import judge, staging_allowance
from tests.unit.test_budgets import run

MiB = 2**20
STATE = {"exp_avg": 16 * MiB, "exp_avg_sq": 16 * MiB, "shard_fp32_from_float16_groups": 16 * MiB}
"""What AdamW holds on the device: 48 MiB, as ``run --strategy lazy`` measured it."""


def fact(cycle=0, *, left=None, moves_optimizer=False, state=48 * MiB, params=16 * MiB):
    left = dict(STATE if left is None else left)
    kept = sum(v for k, v in left.items() if k not in ("param_data", "grad_data"))
    return ResidencyFact(
        cycle=cycle,
        param_bytes_to_move=params,
        param_bytes_left=left.get("param_data", 0) if params else 0,
        param_offload_gave_bytes=params,
        built_on_device_bytes=0,
        moves_optimizer=moves_optimizer,
        optimizer_state_bytes=state,
        optimizer_moved_bytes=max(0, state - kept) if moves_optimizer else 0,
        left_by_owner=left,
        allowance_bytes=staging_allowance(params),  # as the runner sets it
    )


def record(*facts, opt="none", gpu_left=None, phases=(), sequence=()):
    """A run whose summary's audit is the last fact's, as the runner writes it."""
    base = run("lazy", peak_x=1.0, gpu_left=gpu_left, opt=opt)
    summary = dataclasses.replace(
        base.summary, left_after_offload_bytes_by_key=facts[-1].left_by_owner
    )
    return dataclasses.replace(
        base,
        summary=summary,
        residency=list(facts),
        phases=list(phases),
        gpu_baseline_bytes=0 if gpu_left is not None else None,
        sequence=list(sequence),
    )


def residual(limit):
    return budgets_from_flags(None, limit, None)


def test_optimizer_state_kept_by_none_is_not_held_against_a_zero_budget():
    verdict, breaches = judge(record(fact(0), fact(1)), residual("0"))
    assert verdict.ok and breaches == []


def test_what_the_parameter_strategy_was_to_move_still_counts():
    left = {**STATE, "grad_data": 2 * MiB}
    verdict, (breach,) = judge(record(fact(0, left=left), fact(1, left=left)), residual("0"))
    assert verdict.kind == "over budget"
    assert breach.message == (
        "left on device (audited, CPU emulation) 2.00 MiB > 0 B (not counted: optimizer "
        "state 48.00 MiB, which this offload was not to move)"
    )


def test_parameters_left_on_the_device_fail_whatever_the_budget():
    left = {**STATE, "param_data": 16 * MiB}
    verdict, _ = judge(record(fact(0, left=left)), residual("1GiB"))
    assert verdict.kind == "not offloaded"
    assert "param_data 16.00 MiB still on device" in verdict.detail


def test_state_an_optimizer_strategy_moves_counts_in_full():
    """legacy moves the state and leaves the master weights: all of it counts, as before."""
    left = {"shard_fp32_from_float16_groups": 16 * MiB}
    facts = [fact(c, left=left, moves_optimizer=True) for c in (0, 1)]
    run_ = record(*facts, opt="legacy")
    (budget,) = residual("0")
    breach = budget.check(run_)
    assert breach is not None
    assert breach.message == "left on device (audited, CPU emulation) 16.00 MiB > 0 B"
    # the budget adds to the rule that judges state left without one: it never replaces it
    verdict, _ = judge(run_, [budget])
    assert verdict.kind == "partly offloaded" and verdict == judge(run_)[0]


def test_every_cycle_is_judged_not_only_the_last():
    early = {**STATE, "allocated during offload": 4 * MiB}
    verdict, (breach,) = judge(record(fact(0, left=early), fact(1)), residual("1MiB"))
    assert verdict.kind == "over budget"
    assert breach.message == (
        "left on device (audited, CPU emulation) 4.00 MiB > 1.00 MiB after cycle 0's offload "
        "(not counted: optimizer state 48.00 MiB, which this offload was not to move)"
    )


def test_state_grown_during_the_offload_counts():
    """Only the state the optimizer held before the offload stays by design: a tensor the
    offload hung in the state (a copy kept there) is the residual's."""
    grown = {**STATE, "exp_avg": 24 * MiB}  # 8 MiB more than before the offload
    verdict, (breach,) = judge(record(fact(0, left=grown)), residual("0"))
    assert verdict.kind == "over budget"
    assert breach.message.startswith("left on device (audited, CPU emulation) 8.00 MiB > 0 B")


def _offload(cycle: int, allocated: int) -> PhaseRecord:
    gpu = GpuReading(
        allocated_before=allocated,
        allocated_after=allocated,
        allocated_peak=allocated,
        reserved_after=allocated,
        reserved_peak=allocated,
        device_used_after=allocated,
    )
    return PhaseRecord(
        cycle=cycle,
        phase="offload",
        seconds=0.1,
        bytes_moved=16 * MiB,
        gbps=1.0,
        host=HostReading(rss_before=0, rss_after=0, peak=0, shmem_after=0, method="vmhwm"),
        pinned=None,
        gpu=gpu,
        cgroup=None,
    )


def test_on_cuda_the_allocator_s_figure_less_the_kept_state():
    # cycle 0 left 48 MiB of state and 3 MiB more; the last cycle 48 MiB and 1 MiB more
    phases = [_offload(0, 51 * MiB), _offload(1, 49 * MiB)]
    run_ = record(fact(0), fact(1), gpu_left=49 * MiB, phases=phases)
    assert judge(run_, residual("3MiB"))[0].ok
    _, (breach,) = judge(run_, residual("2MiB"))
    assert breach.message.startswith("GPU left after offload 3.00 MiB > 2.00 MiB after cycle 0's")
    _, (breach,) = judge(run_, residual("0"))
    assert breach.message.startswith("GPU left after offload 1.00 MiB > 0 B (not counted: ")


def test_a_sequence_step_that_leaves_the_parameters_loaded_is_held_to_the_optimizer_move():
    """``offload-optimizer-only``: step 2 moves the optimizer alone (the parameters stay by
    the sequence's design), step 5 both."""
    model = {"param_data": 16 * MiB, "grad_data": 32 * MiB}
    step2 = fact(2, left=model, moves_optimizer=True, params=0)
    step5 = fact(5, left={}, moves_optimizer=True)
    run_ = record(step2, step5, opt="complete", sequence=["train"] * 7)
    assert judge(run_, residual("0"))[0].ok
    crumbs = fact(2, left={**model, "exp_avg": MiB}, moves_optimizer=True, params=0)
    (budget,) = residual("0")
    breach = budget.check(record(crumbs, step5, opt="complete", sequence=["t"]))
    assert breach is not None
    assert breach.message == (
        "left on device (audited, CPU emulation) 1.00 MiB > 0 B after step 2's offload "
        "(not counted: parameters 48.00 MiB, which this offload was not to move)"
    )


def test_under_strategy_none_the_parameters_always_count():
    """Nothing moves the parameters: they are the residual's (as they always were)."""
    facts = [fact(c, left={"param_data": 16 * MiB}, moves_optimizer=True, params=0) for c in (0, 1)]
    verdict, (breach,) = judge(record(*facts, opt="complete"), residual("0"))
    assert verdict.kind == "over budget"
    assert breach.message == "left on device (audited, CPU emulation) 16.00 MiB > 0 B"


def test_a_run_with_no_reading_and_no_audit_cannot_meet_a_residual_budget():
    base = run("lazy", peak_x=1.0)
    verdict, (breach,) = judge(base, residual("1GiB"))
    assert verdict.kind == "over budget" and "cannot check" in breach.message
