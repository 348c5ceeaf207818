"""Markdown of every result: a table a pull request or a CI job summary can show.

Rendered from the records alone, with the same columns as the terminal tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import (
    MARKDOWN_COLUMNS,
    PART_COLUMNS,
    caption,
    part_rows,
    rows,
)
from offloadprobe.report.tables import Column


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def table(columns: Sequence[Column[Any]], items: Sequence[Any]) -> list[str]:
    """One Markdown table: a header, the rule, one line per item."""
    out = [_line([c.header for c in columns]), _line(["---"] * len(columns))]
    return out + [_line([c.cell(item) for c in columns]) for item in items]


def comparison_markdown(comparison: Comparison, *, environment: str = "") -> str:
    """Every column in one table, each row's full verdict, and the caption below."""
    out = table(MARKDOWN_COLUMNS, rows(comparison))
    parts = part_rows(comparison)
    if parts:
        out += ["", *table(PART_COLUMNS, parts)]
    out.append("")
    out.append(caption(comparison) + (f"; {environment}" if environment else "") + ".")
    return "\n".join(out) + "\n"


def run_markdown(report: Any) -> str:
    """Each run's verdict, then its parts: what moved, host peak, steady host, left."""
    from offloadprobe.report.run_parts import parts
    from offloadprobe.report.run_summary import PART_COLUMNS as RUN_PARTS
    from offloadprobe.report.run_summary import verdict

    judged = list(report.verdicts) + [None] * (len(report.runs) - len(report.verdicts))
    out = []
    for run, v in zip(report.runs, judged, strict=True):
        out += [f"**{run.label}**: {verdict(run, v)}", ""]
        if run.summary is not None:
            out += [*table(RUN_PARTS, parts(run)), ""]
    if report.budgets:
        out += ["budgets: " + ", ".join(f"`{b}`" for b in report.budgets), ""]
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)
    where = "CPU emulation" if report.emulated else report.device
    out.append(f"{where}; {versions}")
    return "\n".join(out) + "\n"


def repro_markdown(repro: Any) -> str:
    from offloadprobe.report.repro_table import OUTCOME_COLUMNS

    out = [f"**{repro.scenario}** reproduced on {repro.device}", ""]
    out += [line for w in getattr(repro, "warnings", []) for line in (f"> warning: {w}", "")]
    out += table(OUTCOME_COLUMNS, repro.outcomes)
    out.append("")
    out += [f"- {o.strategy}: {o.detail}" for o in repro.outcomes]
    return "\n".join(out) + "\n"


def plan_markdown(plan: Any) -> str:
    from offloadprobe.report.plan_table import OPTIMIZER_VERDICT, PARAMS_VERDICT

    out = [f"**{plan.scenario}**: {plan.model}", ""]
    params = [r for r in plan.strategies if r.kind == "params"]
    optimizer = [r for r in plan.strategies if r.kind == "optimizer"]
    if params:
        out += [*table(PARAMS_VERDICT, params), ""]
    if optimizer:
        out += [*table(OPTIMIZER_VERDICT, optimizer), ""]
    return "\n".join(out)


def probe_plan_markdown(plan: Any) -> str:
    from offloadprobe.report.plan_table import (
        MIXED_COLUMNS,
        PROBE_COLUMNS,
        measured_note,
        probe_title,
    )

    measured = list(getattr(plan, "measured", ()))
    if not measured:
        rows = table(PROBE_COLUMNS, plan.strategies)
    else:
        notes = [measured_note(m) for m in measured]
        rows = [*table(MIXED_COLUMNS, [*plan.strategies, *measured]), "", *notes]
    return "\n".join([f"**{probe_title(plan)}**", "", *rows]) + "\n"


def render(document: Any) -> str:
    """The Markdown of any saved result (``report.documents.Document``)."""
    kind, record = document.kind, document.record
    if kind == "compare":
        return comparison_markdown(record, environment=environment_line(document.data))
    if kind == "run":
        return run_markdown(record)
    if kind == "repro":
        return repro_markdown(record)
    if kind == "plan":
        return plan_markdown(record)
    if kind == "shard plan":
        from offloadprobe.report.shard_plan_table import COLUMNS

        rows = table(COLUMNS, record.ranks)
        head = f"**FSDP2 {record.preset}, {record.blocks} blocks over {record.shards} shards**"
        return "\n".join([head, "", *rows, "", *record.notes]) + "\n"
    if kind == "attach":
        from offloadprobe.attach.report_markdown import attach_markdown

        return str(attach_markdown(record))
    return probe_plan_markdown(record)


def environment_line(doc: dict[str, Any]) -> str:
    """The GPU (or the emulation) and the versions, in one line."""
    versions = doc.get("versions") or {}
    machine = doc.get("machine") or {}
    parts = [machine.get("gpu") or doc.get("device", "")]
    parts += [f"{k} {v}" for k, v in versions.items() if v and k != "python"]
    if doc.get("emulated"):
        parts.append("CPU emulation")
    return ", ".join(p for p in parts if p)
