"""A table of checkable arithmetic: one row per term (label, formula, value)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.markup import escape
from rich.table import Table

from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term


def term_value(term: Term) -> str:
    """Bytes in binary units with the exact count (``88.00 MiB (92,274,688 B)``); counts
    of anything else plainly (``7,247,757,312 elements``)."""
    value = term.value
    if term.unit != "B":
        return f"{value:,} {term.unit}"
    return f"{format_bytes(value)} ({value:,} B)" if abs(value) >= 1024 else f"{value} B"


def terms_table(title: str, terms: Iterable[Term], *, caption: str | None = None) -> Table:
    """Every term on its own row, in order."""
    table = Table(title=escape(title), title_justify="left", caption=caption and escape(caption))
    table.add_column("term", overflow="fold")
    table.add_column("formula")
    table.add_column("value", justify="right")
    for t in terms:
        table.add_row(escape(t.label), escape(t.formula), term_value(t))
    return table
