"""A table of checkable arithmetic: one row per term (label, formula, value)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import RenderableType
from rich.markup import escape

from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term
from offloadprobe.report.tables import compact_table, titled


def term_value(term: Term) -> str:
    """Bytes in binary units with the exact count (``88.00 MiB (92,274,688 B)``); counts
    of anything else plainly (``7,247,757,312 elements``)."""
    value = term.value
    if term.unit != "B":
        return f"{value:,} {term.unit}"
    return f"{format_bytes(value)} ({value:,} B)" if abs(value) >= 1024 else f"{value} B"


def terms_table(title: str, terms: Iterable[Term], *, caption: str | None = None) -> RenderableType:
    """Every term on its own row, in order. Labels and formulas wrap; values never do."""
    table = compact_table()
    table.add_column("term", overflow="fold", ratio=3)
    table.add_column("formula", overflow="fold", ratio=2)
    table.add_column("value", justify="right", no_wrap=True)
    for t in terms:
        table.add_row(escape(t.label), escape(t.formula), term_value(t))
    return titled(table, title=title, caption=caption)
