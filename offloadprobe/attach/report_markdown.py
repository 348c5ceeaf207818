"""attach's report as Markdown (``--markdown F``): the same tables, every call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from offloadprobe.attach import cells
from offloadprobe.attach.records import JobRecord
from offloadprobe.report.tables import NOT_MEASURED, Column

R = TypeVar("R")


def _table(columns: Sequence[Column[R]], rows: Sequence[R]) -> list[str]:
    grid = [[c.cell(r) for c in columns] for r in rows]
    keep = [
        i
        for i, c in enumerate(columns)
        if not c.drop_if_unmeasured or any(row[i] != NOT_MEASURED for row in grid)
    ]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    out = [line([columns[i].header for i in keep]), line(["---"] * len(keep))]
    out += [line([row[i] for i in keep]) for row in grid]
    return [*out, ""]


def attach_markdown(record: JobRecord) -> str:
    """The report as one Markdown document."""
    status, command = cells.headline(record, width=10_000)
    out = [f"### {status}", "", f"`{command.removeprefix('command: ')}`", ""]
    called = [p for p in record.phases if p.calls]
    if called:
        out += ["**phases**", "", *_table(cells.PHASE_COLUMNS, called)]
        if cells.has_device(record):
            out += ["**phases, device**", "", *_table(cells.DEVICE_COLUMNS, called)]
    if cells.has_growth(record):
        out += ["**growth, first call to last**", "", *_table(cells.GROWTH_COLUMNS, record.growth)]
        out += [cells.GROWTH_CAPTION, ""]
    if record.calls:
        out += ["**calls**", "", *_table(cells.CALL_COLUMNS, record.calls)]
    if len(record.ranks) > 1:
        out += ["**ranks**", "", *_table(cells.RANK_COLUMNS, record.ranks)]
    out += ["**nodes**", "", *_table(cells.NODE_COLUMNS, record.nodes)]
    out += [f"- {line}" for line in cells.status_lines(record)]
    return "\n".join(out) + "\n"
