"""The table style every rich reporter shares, and columns declared as data.

CI logs are 80 columns and colourless, so tables are compact (a rule under the header, no
vertical borders) and their columns are chosen to fit there without truncating a number.
A column is one line: a header and a function from a row to its cell. A column that reads
"n/a" on every row is dropped, so CPU emulation does not spend width on GPU readings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

R = TypeVar("R")

NOT_MEASURED = "n/a"


@dataclass(frozen=True, slots=True)
class Column(Generic[R]):
    """One column: its header, how a row becomes its cell, and its alignment."""

    header: str
    cell: Callable[[R], str]
    justify: Literal["left", "right"] = "right"
    drop_if_unmeasured: bool = True
    """Leave the column out when every cell reads ``n/a`` (not measurable on this host)."""
    no_wrap: bool = True
    """Numbers never wrap; where the width runs short, text columns wrap instead."""


def Left(header: str, cell: Callable[[R], str]) -> Column[R]:
    """A left-aligned text column that stays even when empty."""
    return Column(header, cell, justify="left", drop_if_unmeasured=False, no_wrap=False)


def compact_table() -> Table:
    """An empty table in the shared style (a rule under the header, no borders)."""
    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )


def column_table(
    columns: Sequence[Column[R]],
    rows: Iterable[R],
    *,
    title: str | None = None,
    caption: str | None = None,
    sections: Callable[[R], object] | None = None,
    style: Callable[[R], str | None] | None = None,
) -> RenderableType:
    """Render ``rows`` under ``columns``; a change of ``sections(row)`` starts a new section.

    The title and caption are lines of their own, wrapped at the console's width rather
    than the table's.
    """
    rows = list(rows)
    cells = [[c.cell(r) for c in columns] for r in rows]
    keep = [
        i
        for i, c in enumerate(columns)
        if not c.drop_if_unmeasured or not rows or any(row[i] != NOT_MEASURED for row in cells)
    ]
    table = compact_table()
    for i in keep:
        c = columns[i]
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=c.no_wrap,
            overflow="ellipsis" if c.no_wrap else "fold",
        )
    previous: object = None
    for index, (row, row_cells) in enumerate(zip(rows, cells, strict=True)):
        if sections is not None:
            key = sections(row)
            if index and key != previous:
                table.add_section()
            previous = key
        table.add_row(*(escape(row_cells[i]) for i in keep), style=style(row) if style else None)
    return titled(table, title=title, caption=caption)


def titled(
    body: RenderableType, *, title: str | None = None, caption: str | None = None
) -> RenderableType:
    """``body`` with a bold title line above and a dim caption below, when given."""
    items: list[RenderableType] = []
    if title:
        items.append(Text(title, style="bold"))
    items.append(body)
    if caption:
        items.append(Text(caption, style="dim"))
    return Group(*items) if len(items) > 1 else body
