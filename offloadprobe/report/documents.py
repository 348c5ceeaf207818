"""A saved result, whatever verb wrote it: its kind, its typed record, how it was printed.

Every verb's ``--json`` document carries ``kind`` (``run``, ``compare``, ``plan``,
``probe plan``, ``shard plan``, ``repro``, ``attach``) and, where a flag shaped the printed output
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

KINDS = ("run", "compare", "plan", "probe plan", "shard plan", "repro", "attach")


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
    if kind == "shard plan":
        from offloadprobe.plan.shard_plan import ShardPlan

        return rebuild(ShardPlan, doc)
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
    says otherwise; its JSON (``--format json``) carries the judged verdicts too. An attach
    document is judged again the same way, by attach's own budgets and rules
    (``attach.rejudge``). Other kinds come back as they are (a repro's match is derived
    when rendered)."""
    import copy
    from dataclasses import asdict, replace

    from offloadprobe.core.records import judged
    from offloadprobe.core.rejudge import budgets_of, check_finite, disagreement, rejudge

    if doc.kind == "attach":
        from offloadprobe.attach.rejudge import rejudged as attach_rejudged

        record, data, lines = attach_rejudged(doc.record, doc.data, where=where)
        return replace(doc, record=record, data=data), lines
    if doc.kind not in ("run", "compare"):
        return doc, []
    entries = doc.data.get("runs") or []
    record = doc.record
    budgets = budgets_of(record.budgets, where=where)
    if doc.kind == "run":
        found = [
            (run, None, record.verdicts[i] if i < len(record.verdicts) else None, run.label)
            for i, run in enumerate(record.runs)
        ]
    else:
        found = [(r.run, r.candidate.expect, r.verdict, r.candidate.label) for r in record.rows]
    lines, verdicts, data = [], [], doc.data
    for index, ((run, expect, was, label), entry) in enumerate(zip(found, entries, strict=True)):
        row = f"{where}: row {label!r}"
        check_finite(entry, where=row)
        verdict, breaches = rejudge(run, budgets, stored=was, expect=expect, where=row)
        verdicts.append((verdict, breaches, verdict is was))
        lines += [line] if (line := disagreement(row, was, verdict)) else []
        if verdict != was:
            data = copy.deepcopy(doc.data) if data is doc.data else data
            judged(data["runs"][index], verdict)
            if doc.kind == "compare":
                data["runs"][index]["breaches"] = [asdict(b) for b in breaches]
    if doc.kind == "run":
        record = replace(record, verdicts=[v for v, _, _ in verdicts])
    else:
        rows = [
            replace(r, verdict=v, breaches=r.breaches if kept else b)
            for r, (v, b, kept) in zip(record.rows, verdicts, strict=True)
        ]
        record = replace(record, rows=rows)
    return replace(doc, record=record, data=data), lines
