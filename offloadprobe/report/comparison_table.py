"""Rich side-by-side table of a comparison."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import (
    HEADERS,
    PART_HEADERS,
    caption,
    comparison_cells,
    parts_cells,
)


def comparison_table(comparison: Comparison) -> Table:
    table = Table(title="offloadprobe compare", caption=caption(comparison), title_justify="left")
    for name in HEADERS:
        table.add_column(name, justify="left" if name in ("strategy", "verdict") else "right")
    for cells, row in zip(comparison_cells(comparison), comparison.rows, strict=True):
        style = None if row.ok else "red"
        table.add_row(*(escape(c) for c in cells), style=style)
    return table


def parts_table(comparison: Comparison) -> Table | None:
    rows = parts_cells(comparison)
    if rows is None:
        return None
    table = Table(
        title="each part over its own bytes", title_justify="left",
        caption=f"'vs base' = the part's host peak x / {comparison.baseline}'s same part",
    )  # fmt: skip
    for name in PART_HEADERS:
        table.add_column(name, justify="left" if name == "strategy" else "right")
    for cells in rows:
        table.add_row(*(escape(c) for c in cells))
    return table


def render_comparison(comparison: Comparison, console: Console) -> None:
    console.print(comparison_table(comparison))
    parts = parts_table(comparison)
    if parts is not None:
        console.print(parts)
    notes = sorted({n for r in comparison.rows if r.run for n in r.run.notes})
    for note in notes:
        console.print(escape(note), style="yellow")
