"""Rich side-by-side tables of a comparison: host figures and verdicts, then device and rates."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.text import Text

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import (
    DEVICE_COLUMNS,
    HOST_COLUMNS,
    PART_COLUMNS,
    caption,
    part_rows,
    rows,
    verdict_notes,
)
from offloadprobe.report.engine_readings import engine_reading_lines
from offloadprobe.report.tables import column_table
from offloadprobe.report.world_table import compare_nodes_table


def comparison_table(comparison: Comparison) -> RenderableType:
    """Host peak, vs base, steady host and a one-phrase verdict per row."""
    return column_table(
        HOST_COLUMNS,
        rows(comparison),
        title="offloadprobe compare",
        caption=caption(comparison),
        style=lambda c: None if c.row.ok else "yellow" if c.row.passes else "red",
    )


def device_table(comparison: Comparison) -> RenderableType:
    """Pinned and GPU bytes after the last offload, and first / steady rates."""
    return column_table(
        DEVICE_COLUMNS,
        rows(comparison),
        caption=(
            "held: host kept through training, after the loads, x bytes moved; GB/s: first "
            "cycle / steady (median of the later cycles)"
        ),
    )


def parts_table(comparison: Comparison) -> RenderableType | None:
    """Parameters and optimizer state, each over its own bytes; None when no row moved
    optimizer state in a phase of its own."""
    rows = part_rows(comparison)
    if not rows:
        return None
    return column_table(
        PART_COLUMNS,
        rows,
        title="each part over its own bytes",
        caption=f"'vs base' = the part's host peak / {comparison.baseline}'s same part",
        sections=lambda p: p.label,
    )


def _noted(comparison: Comparison) -> list[bool]:
    """Whether each noted row passes (a canary's expected failure), in note order."""
    return [c.row.passes for c in rows(comparison) if c.note is not None]


def render_comparison(comparison: Comparison, console: Console) -> None:
    console.print(comparison_table(comparison))
    for line, passes in zip(verdict_notes(comparison), _noted(comparison), strict=True):
        console.print(Text(line, style="yellow" if passes else "red"))
    parts = parts_table(comparison)
    if parts is not None:
        console.print(parts)
    nodes = compare_nodes_table([(r.candidate.label, r.run) for r in comparison.rows])
    if nodes is not None:
        console.print(nodes)
    console.print(device_table(comparison))
    for r in comparison.rows:
        for line in engine_reading_lines(r.run) if r.run else []:
            console.print(Text(f"{r.candidate.label}: {line}"))
    notes = sorted({n for r in comparison.rows if r.run for n in r.run.notes})
    for note in notes:
        console.print(Text(note, style="yellow"))
