"""A saved result, whatever verb wrote it: its kind, its typed record, how it was printed.

Every verb's ``--json`` document carries ``kind`` (``run``, ``compare``, ``plan``,
``probe plan``, ``repro``, ``attach``) and, where a flag shaped the printed output
(``plan --terms``), ``printed``. ``load`` turns such a document back into its typed
record, so any reporter renders a saved result exactly as the verb did; older documents
without ``kind`` are recognised by their keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.serial import rebuild

KINDS = ("run", "compare", "plan", "probe plan", "repro", "attach")


@dataclass(frozen=True, slots=True)
class Document:
    """One saved result: its kind, its typed record, and its JSON as it was written."""

    kind: str
    record: Any
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def printed(self) -> dict[str, Any]:
        """The flags that shaped the printed output (``{"terms": False}`` for plan)."""
        return dict(self.data.get("printed") or {})


def kind_of(doc: dict[str, Any]) -> str:
    """The document's kind, from its ``kind`` key or, in older files, from its keys."""
    kind = doc.get("kind")
    if kind in KINDS:
        return str(kind)
    from offloadprobe.attach.report_json import is_attach_json

    if is_attach_json(doc):  # before its kind key (schema or schema_version: either)
        return "attach"
    if "baseline" in doc and "runs" in doc:
        return "compare"
    if "runs" in doc:
        return "run"
    if "outcomes" in doc:
        return "repro"
    if "scenario" in doc and "strategies" in doc:
        return "plan"
    if "strategies" in doc and "payload_bytes" in doc:
        return "probe plan"
    raise UsageError(
        "not an offloadprobe result: no run, compare, plan, repro or attach record in it"
    )


def record_of(kind: str, doc: dict[str, Any]) -> Any:
    """The typed record of a document of ``kind``."""
    if kind == "run":
        from offloadprobe.core.records import report_from_dict

        return report_from_dict(doc)
    if kind == "compare":
        from offloadprobe.compare.comparison import Comparison

        return Comparison.from_dict(doc)
    if kind == "plan":
        from offloadprobe.plan.scenario_plan import ScenarioPlan

        return rebuild(ScenarioPlan, doc)
    if kind == "probe plan":
        from offloadprobe.plan.probe import ProbePlan

        return rebuild(ProbePlan, doc)
    if kind == "attach":
        from offloadprobe.attach.report_json import record_from_json

        return record_from_json(doc)
    from offloadprobe.repro.records import Repro

    return rebuild(Repro, doc)


def document(doc: dict[str, Any]) -> Document:
    kind = kind_of(doc)
    try:
        return Document(kind=kind, record=record_of(kind, doc), data=doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"a {kind} result that cannot be read back ({exc})") from None


def load(path: Path) -> Document:
    """The saved result at ``path``; one line on what is wrong where it is not one."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON ({exc}): give a file a verb's --json wrote") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path} is not an offloadprobe result: give a file --json wrote")
    try:
        return document(doc)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def rejudged(doc: Document, where: str) -> tuple[Document, list[str]]:
    """A run or compare document with every row's verdict judged again from its facts, by
    the budgets it names (``core.rejudge``), and one line per row whose stored outcome
    says otherwise. Other kinds come back as they are (their outcomes are derived when
    rendered: a repro's match, an attach's breaches)."""
    from dataclasses import replace

    from offloadprobe.core.rejudge import budgets_of, check_finite, disagreement, rejudge

    if doc.kind not in ("run", "compare"):
        return doc, []
    entries = doc.data.get("runs") or []
    lines = []
    record = doc.record
    budgets = budgets_of(record.budgets, where=where)
    if doc.kind == "run":
        stored = list(record.verdicts) + [None] * (len(record.runs) - len(record.verdicts))
        verdicts = []
        for run, entry, was in zip(record.runs, entries, stored, strict=True):
            row = f"{where}: row {run.label!r}"
            check_finite(entry, where=row)
            verdict, _ = rejudge(run, budgets, stored=was, where=row)
            verdicts.append(verdict)
            lines += [line] if (line := disagreement(row, was, verdict)) else []
        return replace(doc, record=replace(record, verdicts=verdicts)), lines
    rows = []
    for found, entry in zip(record.rows, entries, strict=True):
        row = f"{where}: row {found.candidate.label!r}"
        check_finite(entry, where=row)
        verdict, breaches = rejudge(
            found.run, budgets, stored=found.verdict, expect=found.candidate.expect, where=row
        )
        kept = verdict is found.verdict
        rows.append(replace(found, verdict=verdict, breaches=found.breaches if kept else breaches))
        lines += [line] if (line := disagreement(row, found.verdict, verdict)) else []
    return replace(doc, record=replace(record, rows=rows)), lines
