"""Compare strategies: one fresh child process per combination, one record for all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from typing import Any

from offloadprobe.core.budgets import Breach, Budget
from offloadprobe.core.config import RunConfig
from offloadprobe.core.records import SCHEMA_VERSION, RunRecord, RunSummary, Verdict
from offloadprobe.core.verdicts import judge
from offloadprobe.isolation.child import ChildOutcome, ChildSpec, alloc_conf_env, run_child
from offloadprobe.isolation.failure import failure_of


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One combination to measure."""

    strategy: str
    optimizer_strategy: str | None = None
    alloc_conf: str | None = None

    @property
    def label(self) -> str:
        """Both strategies, always: ``lazy + legacy``, ``naive + none``."""
        label = f"{self.strategy} + {self.optimizer_strategy or 'none'}"
        if self.alloc_conf:
            label += f" [{self.alloc_conf}]"
        return label


@dataclass(frozen=True, kw_only=True, slots=True)
class ComparisonRow:
    """A candidate and what its child process produced."""

    candidate: Candidate
    outcome: ChildOutcome
    run: RunRecord | None
    verdict: Verdict
    breaches: list[Breach] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict.ok


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """All rows, and which one the ratios are taken against."""

    rows: list[ComparisonRow]
    baseline: str
    environment: dict[str, Any] = field(default_factory=dict)
    """The parent's own device, versions, machine, model, payload: the JSON's stable keys
    even when every child died."""

    def baseline_summary(self) -> RunSummary | None:
        row = next((r for r in self.rows if r.candidate.label == self.baseline), None)
        return row.run.summary if row is not None and row.run is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The ``run`` JSON schema with one ``runs`` entry per candidate."""
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **self.environment}
        child = next((r.outcome.report for r in self.rows if r.outcome.report), None)
        if child is not None:
            doc.update({k: v for k, v in child.items() if k != "runs"})
            doc["schema_version"] = SCHEMA_VERSION
        runs = []
        for row in self.rows:
            report = row.outcome.report
            entry = (
                dict(report["runs"][0])
                if report and report.get("runs")
                else {"strategy": row.candidate.strategy, "summary": None, "cycles": []}
            )
            entry.update(
                label=row.candidate.label,
                optimizer_strategy=row.candidate.optimizer_strategy or "none",
                alloc_conf=row.candidate.alloc_conf,
                verdict=row.verdict.line(),
                outcome=asdict(row.verdict),
                exit_code=row.outcome.exit_code,
                failure=asdict(row.outcome.failure) if row.outcome.failure else None,
            )
            runs.append(entry)
        settings = {k: v for k, v in (doc.get("settings") or {}).items() if k != "strategy"}
        doc["settings"] = {**settings, "labels": [r.candidate.label for r in self.rows]}
        doc["runs"] = runs
        doc["baseline"] = self.baseline
        return doc


def candidates(
    strategies: list[str], optimizer_strategies: list[str], alloc_confs: list[str]
) -> list[Candidate]:
    """Every strategy x optimizer strategy x allocator setting, in the given order."""
    return [
        Candidate(strategy=s, optimizer_strategy=o, alloc_conf=a)
        for a, s, o in product(alloc_confs or [None], strategies, optimizer_strategies or [None])
    ]


def compare(
    items: list[Candidate],
    base: RunConfig,
    *,
    baseline: str,
    budgets: list[Budget] | None = None,
    environment: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int, Candidate], None] | None = None,
    extra_env: Callable[[int], dict[str, str]] | None = None,
    nproc_per_node: int = 1,
) -> Comparison:
    """Run every candidate in its own process, one after another.

    ``extra_env(index)`` adds per-row environment (e.g. where to write its timeline).
    """
    rows = []
    for index, item in enumerate(items):
        if on_start is not None:
            on_start(index, item)
        config = replace(
            base,
            strategy=item.strategy,
            optimizer_strategy=item.optimizer_strategy or base.optimizer_strategy,
        )
        env = {**alloc_conf_env(item.alloc_conf), **(extra_env(index) if extra_env else {})}
        spec = ChildSpec(
            label=item.label, config=config, env=env, timeout_s=timeout_s,
            nproc_per_node=nproc_per_node,
        )  # fmt: skip
        outcome = run_child(spec)
        run = outcome.run
        verdict, breaches = judge(run, budgets or [], failure=failure_of(outcome))
        rows.append(
            ComparisonRow(
                candidate=item, outcome=outcome, run=run, verdict=verdict, breaches=breaches
            )
        )
    return Comparison(rows=rows, baseline=baseline, environment=environment or {})
