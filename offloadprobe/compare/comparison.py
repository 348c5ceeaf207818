"""Compare strategies: one fresh worker per combination, one typed record for all.

A ``Comparison`` holds typed rows (the run record, its verdict, the budgets it broke,
how its worker ended) and the environment; ``to_dict`` and ``from_dict`` are each
other's inverse, so a saved comparison renders exactly as it was printed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from typing import Any

from offloadprobe.core.budgets import Breach
from offloadprobe.core.config import RunConfig
from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.records import (
    SCHEMA_VERSION,
    RunRecord,
    RunSummary,
    judged,
    row_label,
    run_from_dict,
    run_to_dict,
    verdict_from_dict,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One combination to measure."""

    strategy: str
    optimizer_strategy: str | None = None
    alloc_conf: str | None = None
    name: str | None = None
    """The row's own name (``--strategy name=spec``)."""
    expect: str | None = None
    """A canary row's expected verdict kind (``--expect naive=over-budget``)."""
    engine: str | None = None
    """The training engine (None: the default's; named in the label otherwise)."""

    @property
    def label(self) -> str:
        """The row's name, or both strategies: ``lazy + legacy``, ``naive + none``."""
        label = row_label(self.strategy, self.optimizer_strategy, self.engine, self.name)
        if self.alloc_conf:
            label += f" [{self.alloc_conf}]"
        return label


@dataclass(frozen=True, kw_only=True, slots=True)
class ComparisonRow:
    """A candidate and what its worker measured, judged."""

    candidate: Candidate
    run: RunRecord | None
    verdict: Verdict
    breaches: list[Breach] = field(default_factory=list)
    worker_exit_code: int | None = None
    """The measured process's own exit status (negative: the signal that killed it)."""
    timeline: dict[str, Any] | None = None
    """What the row's worker sampled (``--trace``/``--plot``); not saved in the JSON."""

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def passes(self) -> bool:
        """Ok, or the failure its canary expectation names (exit 0 either way)."""
        return self.verdict.passes


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """All rows, and which one the ratios are taken against."""

    rows: list[ComparisonRow]
    baseline: str
    environment: dict[str, Any] = field(default_factory=dict)
    """Device, emulation, versions, machine, model, payload, settings: this run's."""
    budgets: list[str] = field(default_factory=list)

    def baseline_summary(self) -> RunSummary | None:
        row = next((r for r in self.rows if r.candidate.label == self.baseline), None)
        return row.run.summary if row is not None and row.run is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The ``run`` JSON schema with one ``runs`` entry per candidate."""
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": "compare"}
        doc.update(self.environment)
        runs = []
        for row in self.rows:
            entry = (
                run_to_dict(row.run)
                if row.run is not None
                else {
                    "strategy": row.candidate.strategy,
                    "summary": None,
                    "cycles": [],
                }
            )
            judged(entry, row.verdict)
            entry.update(
                label=row.candidate.label,
                name=row.candidate.name,
                optimizer_strategy=row.candidate.optimizer_strategy or "none",
                alloc_conf=row.candidate.alloc_conf,
                expect=row.candidate.expect,
                budgets=list(self.budgets),
                worker_exit_code=row.worker_exit_code,
                breaches=[asdict(b) for b in row.breaches],
            )
            runs.append(entry)
        settings = dict(doc.get("settings") or {})
        doc["settings"] = {**settings, "labels": [r.candidate.label for r in self.rows]}
        doc["budgets"] = list(self.budgets)
        doc["runs"] = runs
        doc["baseline"] = self.baseline
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Comparison:
        rows = []
        for entry in doc["runs"]:
            candidate = Candidate(
                strategy=entry["strategy"],
                optimizer_strategy=entry.get("optimizer_strategy"),
                alloc_conf=entry.get("alloc_conf"),
                name=entry.get("name"),
                expect=entry.get("expect"),
                engine=entry.get("engine"),
            )
            run = run_from_dict(entry) if "description" in entry else None
            rows.append(
                ComparisonRow(
                    candidate=candidate,
                    run=run,
                    verdict=verdict_from_dict(entry["outcome"]),
                    breaches=[Breach(**b) for b in entry.get("breaches") or []],
                    worker_exit_code=entry.get("worker_exit_code"),
                )
            )
        skip = {"runs", "baseline", "budgets", "schema_version", "kind"}
        environment = {k: v for k, v in doc.items() if k not in skip}
        environment["settings"] = {
            k: v for k, v in (doc.get("settings") or {}).items() if k != "labels"
        }
        return cls(
            rows=rows,
            baseline=doc["baseline"],
            environment=environment,
            budgets=list(doc.get("budgets") or []),
        )


def candidates(
    strategies: Sequence[str | tuple[str | None, str]],
    optimizer_strategies: list[str],
    alloc_confs: list[str],
    engine: str | None = None,
) -> list[Candidate]:
    """Every strategy x optimizer strategy x allocator setting, in the given order;
    a strategy is a spec or ``(row name or None, spec)``. A spec ``model+optimizer``
    (``verl_fsdp2+verl_optimizer``) is one row with its own optimizer strategy."""
    strategies = [(None, s) if isinstance(s, str) else s for s in strategies]
    found = []
    for a, (n, s) in product(alloc_confs or [None], strategies):
        model, paired = split_pair(s)
        for o in [paired] if paired else optimizer_strategies or [None]:
            found.append(
                Candidate(strategy=model, optimizer_strategy=o, alloc_conf=a, name=n, engine=engine)
            )
    return found


def split_pair(spec: str) -> tuple[str, str | None]:
    """``(model strategy, optimizer strategy or None)`` of a ``model+optimizer`` spec."""
    model, plus, optimizer = spec.partition("+")
    return (model, optimizer) if plus and model and optimizer else (spec, None)


Measure = Callable[[int, Candidate, RunConfig, dict[str, str]], Any]
"""Runs one row: ``(index, candidate, config, env) -> isolation.rows.Row``."""


def compare(
    items: list[Candidate],
    base: RunConfig,
    *,
    baseline: str,
    measure: Measure,
    environment: dict[str, Any] | None = None,
    budgets: Sequence[str] = (),
    on_start: Callable[[int, Candidate], None] | None = None,
) -> Comparison:
    """Run every candidate in its own worker, one after another; a canary row's verdict
    is held to what it expects (``core.verdicts.expecting``)."""
    from offloadprobe.core.alloc_env import alloc_conf_env
    from offloadprobe.core.verdicts import expecting

    rows = []
    environment = dict(environment or {})
    measured = False
    for index, item in enumerate(items):
        if on_start is not None:
            on_start(index, item)
        config = replace(
            base,
            strategy=item.strategy,
            optimizer_strategy=item.optimizer_strategy or base.optimizer_strategy,
            label=item.label if item.name or item.alloc_conf else None,
        )
        row = measure(index, item, config, alloc_conf_env(item.alloc_conf))
        if not measured and row.outcome.report is not None:
            measured = True  # the first worker's own view: CUDA's version, the GPU
            environment.update(_environment_of(row.report))
        rows.append(
            ComparisonRow(
                candidate=item,
                run=row.run,
                verdict=expecting(row.verdict, item.expect),
                breaches=row.breaches,
                worker_exit_code=row.outcome.exit_code,
                timeline=row.outcome.timeline,
            )
        )
    return Comparison(rows=rows, baseline=baseline, environment=environment, budgets=list(budgets))


def _environment_of(report: Any) -> dict[str, Any]:
    return {
        "device": report.device,
        "emulated": report.emulated,
        "emulation_note": report.emulation_note,
        "versions": report.versions,
        "machine": report.machine,
    }
