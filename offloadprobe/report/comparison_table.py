"""Rich side-by-side table of a comparison."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import HEADERS, caption, comparison_cells


def comparison_table(comparison: Comparison) -> Table:
    table = Table(title="offloadprobe compare", caption=caption(comparison), title_justify="left")
    for name in HEADERS:
        table.add_column(name, justify="left" if name in ("strategy", "verdict") else "right")
    for cells, row in zip(comparison_cells(comparison), comparison.rows, strict=True):
        style = None if row.ok else "red"
        table.add_row(*(escape(c) for c in cells), style=style)
    return table


def render_comparison(comparison: Comparison, console: Console) -> None:
    console.print(comparison_table(comparison))
    notes = sorted({n for r in comparison.rows if r.run for n in r.run.notes})
    for note in notes:
        console.print(escape(note), style="yellow")
