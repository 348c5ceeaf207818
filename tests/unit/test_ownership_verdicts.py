"""Ownership by bytes and budgets that only add (issue 35, points 1 and 2): the verdict
rules of ``core.verdicts`` on hand-built facts, exact bytes."""

from __future__ import annotations

import dataclasses

import pytest

from offloadprobe.core.budgets import parse_host_peak
from offloadprobe.core.option_budgets import budgets_from_flags
from offloadprobe.core.records import ResidencyFact
from offloadprobe.core.residual import audited_left
from offloadprobe.core.verdicts import (
    copy_allowance,
    cycle_residency_problems,
    judge,
    served_bytes,
    staging_allowance,
)
from tests.unit.test_budgets import run

MiB = 2**20
P = 16 * MiB


def fact(cycle: int = 0, **changes) -> ResidencyFact:
    """An honest offload of 16 MiB of parameters (``none`` keeps 96 MiB of state)."""
    base = ResidencyFact(
        cycle=cycle,
        param_bytes_to_move=P,
        param_bytes_left=0,
        param_offload_gave_bytes=P,
        built_on_device_bytes=0,
        moves_optimizer=False,
        optimizer_state_bytes=96 * MiB,
        optimizer_moved_bytes=0,
        allowance_bytes=staging_allowance(P),
    )
    return dataclasses.replace(base, **changes)


def record(*facts: ResidencyFact):
    return dataclasses.replace(run("lazy", peak_x=1.0), residency=list(facts))


def test_a_copy_found_by_content_is_not_offloaded_wherever_it_hangs():
    copies = {"main_param.decoupled_grad": P // 4, "stash on a main parameter": P // 4}
    (line,) = cycle_residency_problems(fact(param_copies=copies))
    assert line == (
        "param_data 8.00 MiB of 16.00 MiB still on device after offload, by content: a copy "
        "in main_param.decoupled_grad 4.00 MiB, stash on a main parameter 4.00 MiB"
    )


def test_a_staging_buffer_s_eighth_of_the_parameters_is_no_copy():
    assert copy_allowance(P) == P // 8 + P // 64
    assert cycle_residency_problems(fact(param_copies={"Staging.buffer": P // 8})) == []
    over = fact(param_copies={"Staging.buffer": copy_allowance(P) + 1})
    assert cycle_residency_problems(over)[0].startswith("param_data ")


def test_the_parts_release_pays_for_the_parts_only():
    """16 MiB of parameters kept, the 16 MiB reference model freed: the net drop is the
    reference model's, so the parameters gave nothing."""
    parts = dict(parts_to_move={"ref_model": P}, param_offload_gave_bytes=P)
    (line,) = cycle_residency_problems(fact(**parts))
    assert line == (
        "param_data freed, but the device gave back 0 B net of 16.00 MiB (less 16.00 MiB "
        "the parts outside param_data gave) (a copy kept on the device?)"
    )
    honest = dict(
        parts_to_move={"ref_model": P, "frozen": MiB}, param_offload_gave_bytes=2 * P + MiB
    )
    assert cycle_residency_problems(fact(**honest)) == []


def test_a_part_left_on_the_device_gave_nothing_to_pay_with():
    left = fact(parts_to_move={"ref_model": P}, left_by_owner={"ref_model": P})
    assert cycle_residency_problems(left) == [
        "reference model 16.00 MiB of 16.00 MiB still on device after offload"
    ]


def test_the_staging_allowance_serves_the_parameters_never_the_optimizer_state():
    """The issue's case: a 16 MiB payload and 96 MiB of Adam state moved together made an
    allowance of 18 MiB, room for a whole copy of the parameters."""
    assert served_bytes(P, 0, 96 * MiB) == P
    assert staging_allowance(served_bytes(P, 0, 96 * MiB)) == 6 * MiB
    assert served_bytes(P, 4 * MiB, 96 * MiB) == P + 4 * MiB  # the parts are the parameters'
    assert served_bytes(0, 0, 96 * MiB) == 96 * MiB  # an optimizer move alone: its own part


def _failing() -> list[tuple[str, ResidencyFact]]:
    hidden = {"made during the offloads and loads": 7 * MiB}
    return [
        ("not offloaded", fact(param_copies={"Pageable.copy": P})),
        ("not offloaded", fact(param_offload_gave_bytes=0)),
        ("not offloaded", fact(unreferenced=hidden)),
        ("partly offloaded", fact(left_by_owner={"grad_data": 8 * MiB})),
    ]


@pytest.mark.parametrize(("kind", "wrong"), _failing())
@pytest.mark.parametrize("budget", ["0", "4MiB", "1GiB"])
def test_a_budget_never_switches_a_rule_off(kind, wrong, budget):
    """Every rule judges every cycle with or without a budget: the wrong cycle is the first
    here and the last is right, and no residual budget turns the verdict into ok."""
    facts = record(wrong, fact(cycle=1))
    alone, _ = judge(facts)
    assert alone.kind == kind
    for budgets in (budgets_from_flags(None, budget, None), [parse_host_peak("9x")]):
        verdict, _ = judge(facts, budgets)
        assert verdict == alone, (budget, verdict)


def test_the_cpu_residual_counts_what_no_part_owns_made_whenever():
    """CPU emulation's residual holds the memory no part owns the ledger found (made before
    the first train step or during the moves: the strategy's), once, and not the train
    steps' own crumbs."""
    audited = {"shard_fp32_from_float16_groups": 32 * MiB, "allocated during offload": 2 * MiB}
    found = fact(
        left_by_owner=audited,
        unreferenced={"made during the offloads and loads": 2 * MiB, "made during train": 32768},
    )
    assert audited_left(found) == 34 * MiB
    made_before = fact(unreferenced={"made before the first train step": 7 * MiB})
    assert audited_left(made_before) == 7 * MiB
