"""attach's report for the terminal (stderr after the job): 80 columns, colourless.

Phases (host side; device side where measured), growth per phase and rank from first
call to last (where a phase was called more than once), then every call (up to
``MAX_CALL_ROWS``), ranks, nodes, and one line per finding (never called, not
instrumented, over budget, notes) with the verdict last.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from offloadprobe.attach import cells
from offloadprobe.attach.records import JobRecord
from offloadprobe.report.tables import column_table


def render_attach(record: JobRecord, console: Console) -> None:
    """Print the whole report to ``console``."""
    for line in cells.headline(record, console.width):
        console.print(Text(line))
    called = [p for p in record.phases if p.calls]
    if called:
        console.print(column_table(cells.PHASE_COLUMNS, called, title="phases"))
        if cells.has_device(record):
            console.print(column_table(cells.DEVICE_COLUMNS, called, title="phases, device"))
    if cells.has_growth(record):
        console.print(
            column_table(
                cells.GROWTH_COLUMNS,
                record.growth,
                title="growth, first call to last",
                caption=cells.GROWTH_CAPTION,
            )
        )
    if record.calls and len(record.calls) <= cells.MAX_CALL_ROWS:
        console.print(
            column_table(
                cells.CALL_COLUMNS,
                record.calls,
                title="calls",
                caption=cells.call_caption(record),
            )
        )
    elif record.calls:
        console.print(Text(f"{len(record.calls)} calls: every one is in --json"))
    if len(record.ranks) > 1:
        console.print(column_table(cells.RANK_COLUMNS, record.ranks, title="ranks"))
    console.print(column_table(cells.NODE_COLUMNS, record.nodes, title="nodes"))
    for line in cells.status_lines(record):
        console.print(Text(line))
