"""Turn what a run recorded, and the budgets it was held to, into one verdict per row.

The same rule serves ``run``, ``compare``, ``repro`` and the pytest plugin: a row is
``ok`` only when it completed, every byte came back, it moved what it should have
moved and it kept every budget. Anything else names its own outcome, and where a
phase is to blame, the phase and cycle.
"""

from __future__ import annotations

from collections.abc import Iterable

from offloadprobe.core.budgets import Breach, Budget
from offloadprobe.core.records import ChildFailure, RunRecord, Verdict

OK = Verdict(kind="ok")


def judge(
    run: RunRecord | None,
    budgets: Iterable[Budget] = (),
    *,
    failure: ChildFailure | None = None,
) -> tuple[Verdict, list[Breach]]:
    """The row's verdict and every budget it broke (the first one names the verdict)."""
    if failure is not None and (run is None or run.failure is None):
        return failure.verdict, []
    if run is None:
        return Verdict(kind="crashed", detail="no record was produced"), []
    if run.failure is not None:
        kind = run.failure_kind or "crashed"
        return Verdict(
            kind=kind, detail=run.failure, cycle=run.failure_cycle, phase=run.failure_phase
        ), []
    if run.integrity:
        more = f" (+{len(run.integrity) - 1} more)" if len(run.integrity) > 1 else ""
        return Verdict(kind="corrupted", detail=run.integrity[0] + more), []
    if run.not_offloaded:
        return Verdict(kind="not offloaded", detail="; ".join(run.not_offloaded)), []
    if run.summary is None:
        return Verdict(kind="crashed", detail="no offload/load pair completed"), []
    if run.world is not None:
        return _judge_ranks(run, list(budgets))
    breaches = [b for budget in budgets if (b := budget.check(run)) is not None]
    if breaches:
        more = f" (+{len(breaches) - 1} more)" if len(breaches) > 1 else ""
        return Verdict(kind="over budget", detail=breaches[0].message + more), breaches
    return OK, []


def _judge_ranks(run: RunRecord, budgets: list[Budget]) -> tuple[Verdict, list[Breach]]:
    """Several ranks: every rank's own record is judged; the first rank that is not ok
    names the row's verdict (budgets hold per rank)."""
    assert run.world is not None
    for rank in run.world.ranks:
        verdict, breaches = judge(rank, budgets)
        if not verdict.ok:
            where = rank.place.rank if rank.place else "?"
            return Verdict(
                kind=verdict.kind, detail=f"rank {where}: {verdict.detail}",
                cycle=verdict.cycle, phase=verdict.phase,
            ), breaches  # fmt: skip
    return OK, []


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """0 when every row is ok; 2 when any row was bad input; else 1."""
    codes = {v.exit_code for v in verdicts}
    return 2 if 2 in codes else 1 if 1 in codes else 0
