"""The side-by-side comparison as columns, shared by the rich and Markdown reporters.

The rich output splits the columns in two tables that each fit 80 columns (host figures
and the verdict; pinned, GPU and rates); Markdown, for pull requests, has them all in one.
A verdict cell is one short phrase; the full verdict of a row that is not ok follows the
table as a numbered line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offloadprobe.compare.comparison import Comparison, ComparisonRow
from offloadprobe.core.records import PartSummary, RunSummary
from offloadprobe.core.units import format_bytes, format_ratio
from offloadprobe.report.tables import NOT_MEASURED, Column, Left

NO_RUN = "-"


@dataclass(frozen=True, slots=True)
class Cmp:
    """One comparison row with what its cells are relative to."""

    row: ComparisonRow
    base: RunSummary | None
    note: int | None = None
    """Number of the line under the table that gives the full verdict."""

    @property
    def summary(self) -> RunSummary | None:
        return self.row.run.summary if self.row.run is not None else None


def full_verdict(row: ComparisonRow) -> str:
    """The row's verdict in words (``over budget: host peak 4.20x > 1.70x``)."""
    return row.verdict.line()


def short_verdict(row: ComparisonRow) -> str:
    """The verdict's kind (``over budget``, ``killed``): one short phrase for the cell;
    a canary row's expected failure reads ``expected`` (its note under the table names
    the kind: the cell stays narrow enough for 80 columns)."""
    return "expected" if row.verdict.expected else row.verdict.kind


def _host_cell(figures: RunSummary | PartSummary | None, which: str) -> str:
    """``peak`` or ``steady`` host figure as "ratio bytes"; a run summary and a part
    summary name these fields alike."""
    if figures is None:
        return NO_RUN
    if which == "peak":
        return f"{format_ratio(figures.host_peak_x)} {format_bytes(figures.host_peak_bytes)}"
    return f"{format_ratio(figures.steady_host_x)} {format_bytes(figures.steady_host_bytes)}"


def _vs_cell(
    figures: RunSummary | PartSummary | None, base: RunSummary | PartSummary | None
) -> str:
    """Host peak over the baseline's (the same part's, for parts)."""
    if figures is None:
        return NO_RUN
    if base is None or base.host_peak_x <= 0:
        return NOT_MEASURED
    return f"{figures.host_peak_x / base.host_peak_x:.2f}x"


def _fig(c: Cmp, which: str) -> str:
    return _host_cell(c.summary, which)


def _vs(c: Cmp) -> str:
    return _vs_cell(c.summary, c.base)


def _rate(first: float | None, steady: float | None) -> str:
    def one(x: float | None) -> str:
        return NOT_MEASURED if x is None else f"{x:.1f}"

    return NOT_MEASURED if steady is None else f"{one(first)} / {one(steady)}"


def _bytes(c: Cmp, name: str) -> str:
    s = c.summary
    return NO_RUN if s is None else format_bytes(getattr(s, name))


def _held(c: Cmp) -> str:
    """Host bytes kept through the train phases, as a multiple of the bytes moved."""
    s = c.summary
    if s is None:
        return NO_RUN
    if s.held_while_training_x is None:
        return NOT_MEASURED
    return f"{s.held_while_training_x:.2f}x"


def _verdict_cell(c: Cmp) -> str:
    return short_verdict(c.row) + (f" ({c.note})" if c.note is not None else "")


def _rates(c: Cmp, kind: str) -> str:
    s = c.summary
    if s is None:
        return NO_RUN
    return _rate(getattr(s, f"first_{kind}_gbps"), getattr(s, f"{kind}_gbps"))


LABEL: Column[Cmp] = Left("strategy", lambda c: c.row.candidate.label)

HOST_COLUMNS: list[Column[Cmp]] = [
    LABEL,
    Column("host peak", lambda c: _fig(c, "peak")),
    Column("vs base", _vs),
    Column("steady host", lambda c: _fig(c, "steady")),
    Column("verdict", _verdict_cell, justify="left", drop_if_unmeasured=False),
]

DEVICE_COLUMNS: list[Column[Cmp]] = [
    LABEL,
    Column("held", _held),
    Column("pinned", lambda c: _bytes(c, "pinned_reserved_bytes")),
    Column("GPU left", lambda c: _bytes(c, "gpu_left_after_offload_bytes")),
    Column("offload GB/s", lambda c: _rates(c, "offload")),
    Column("load GB/s", lambda c: _rates(c, "load")),
]


@dataclass(frozen=True, slots=True)
class PartRow:
    """One part (parameters or optimizer state) of one comparison row."""

    label: str
    name: str
    part: Any
    """A ``PartSummary`` (moved_bytes, host_peak_x, ...) or None when the part did not move."""
    base: Any


def _part_x(p: PartRow, which: str) -> str:
    return _host_cell(p.part, which)


def _part_vs(p: PartRow) -> str:
    return _vs_cell(p.part, p.base)


PART_COLUMNS: list[Column[PartRow]] = [
    Left("strategy", lambda p: p.label),
    Left("part", lambda p: p.name),
    Column("moves", lambda p: NO_RUN if p.part is None else format_bytes(p.part.moved_bytes)),
    Column("host peak", lambda p: _part_x(p, "peak")),
    Column("vs base", _part_vs),
    Column("steady host", lambda p: _part_x(p, "steady")),
]


def part_rows(comparison: Comparison) -> list[PartRow]:
    """Each row's parts over their own bytes, 'vs base' against the baseline's same part;
    empty unless some row measured its optimizer state in a phase of its own."""
    summaries = [r.run.summary if r.run else None for r in comparison.rows]
    if not any(s is not None and s.optimizer is not None for s in summaries):
        return []
    base = comparison.baseline_summary()
    out = []
    for row, s in zip(comparison.rows, summaries, strict=True):
        for attr, name in (("params", "parameters"), ("optimizer", "optimizer")):
            part = getattr(s, attr) if s is not None else None
            out.append(PartRow(row.candidate.label, name, part, getattr(base, attr, None)))
    return out


MARKDOWN_COLUMNS: list[Column[Cmp]] = [
    *HOST_COLUMNS[:-1],
    *DEVICE_COLUMNS[1:],
    Left("verdict", lambda c: full_verdict(c.row)),
]


def rows(comparison: Comparison) -> list[Cmp]:
    """Every row in run order; rows that are not ok get a numbered note."""
    base = comparison.baseline_summary()
    out, notes = [], 0
    for row in comparison.rows:
        note = None
        if full_verdict(row) != short_verdict(row):
            notes += 1
            note = notes
        out.append(Cmp(row, base, note))
    return out


def verdict_notes(comparison: Comparison) -> list[str]:
    """``(n) label: full verdict`` for every row whose cell had to be shortened."""
    return [
        f"({c.note}) {c.row.candidate.label}: {full_verdict(c.row)}"
        for c in rows(comparison)
        if c.note is not None
    ]


def caption(comparison: Comparison) -> str:
    """What the numbers are over, and which settings all rows share."""
    first = next((r.run for r in comparison.rows if r.run is not None), None)
    payload = format_bytes(first.payload_bytes) if first else NOT_MEASURED
    return (
        f"payload {payload}; x = multiple of the bytes each row moves (parameters plus any "
        f"optimizer state) over the host RSS before the first offload; 'vs base' = host "
        f"peak / {comparison.baseline}'s; each row ran in a fresh process"
    )
