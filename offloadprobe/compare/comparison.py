"""Compare strategies: one fresh child process per combination, one record for all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.records import RunRecord, RunSummary
from offloadprobe.isolation.child import ChildOutcome, ChildSpec, alloc_conf_env, run_child


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One combination to measure."""

    strategy: str
    optimizer_strategy: str | None = None
    alloc_conf: str | None = None

    @property
    def label(self) -> str:
        label = self.strategy
        if self.optimizer_strategy:
            label += f"+{self.optimizer_strategy}"
        if self.alloc_conf:
            label += f" [{self.alloc_conf}]"
        return label


@dataclass(frozen=True, kw_only=True, slots=True)
class ComparisonRow:
    """A candidate and what its child process produced."""

    candidate: Candidate
    outcome: ChildOutcome
    run: RunRecord | None

    @property
    def ok(self) -> bool:
        return self.outcome.verdict == "ok" and self.run is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """All rows, and which one the ratios are taken against."""

    rows: list[ComparisonRow]
    baseline: str

    def baseline_summary(self) -> RunSummary | None:
        row = next((r for r in self.rows if r.candidate.label == self.baseline), None)
        return row.run.summary if row is not None and row.run is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The ``run`` JSON schema with one ``runs`` entry per candidate."""
        doc: dict[str, Any] | None = None
        runs = []
        for row in self.rows:
            report = row.outcome.report
            if report is not None and doc is None:
                doc = {k: v for k, v in report.items() if k != "runs"}
            entry = (
                dict(report["runs"][0])
                if report and report.get("runs")
                else {"strategy": row.candidate.strategy, "summary": None, "cycles": []}
            )
            entry.update(
                label=row.candidate.label,
                optimizer_strategy=row.candidate.optimizer_strategy,
                alloc_conf=row.candidate.alloc_conf,
                verdict=row.outcome.verdict,
                exit_code=row.outcome.exit_code,
            )
            runs.append(entry)
        doc = doc or {"schema_version": 1}
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


def model_args(model: ModelConfig) -> list[str]:
    """The resolved model shape as ``run`` flags, identical for every child."""
    return [
        "--layers", str(model.num_layers),
        "--hidden", str(model.hidden_size),
        "--heads", str(model.num_attention_heads),
        "--vocab", str(model.vocab_size),
        "--seq-length", str(model.seq_length),
        "--micro-batch", str(model.micro_batch_size),
    ]  # fmt: skip


def compare(
    items: list[Candidate],
    common_args: list[str],
    *,
    baseline: str,
    timeout_s: float | None = None,
    on_start: Callable[[int, Candidate], None] | None = None,
    extra_env: Callable[[int], dict[str, str]] | None = None,
) -> Comparison:
    """Run every candidate in its own process, one after another.

    ``extra_env(index)`` adds per-row environment (e.g. where to write its timeline).
    """
    rows = []
    for index, item in enumerate(items):
        if on_start is not None:
            on_start(index, item)
        args = ["--strategy", item.strategy, *common_args]
        if item.optimizer_strategy:
            args += ["--optimizer-strategy", item.optimizer_strategy]
        env = {**alloc_conf_env(item.alloc_conf), **(extra_env(index) if extra_env else {})}
        spec = ChildSpec(label=item.label, args=args, env=env, timeout_s=timeout_s)
        outcome = run_child(spec)
        rows.append(ComparisonRow(candidate=item, outcome=outcome, run=outcome.run))
    return Comparison(rows=rows, baseline=baseline)
