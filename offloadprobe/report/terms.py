"""Checkable arithmetic, one term per entry: its label and value, its formula below.

A term's label can be a parameter name of 63 characters
(``decoder.layers.*.mlp.experts.local_experts.*.linear_fc1.weight``) and its value 33
(``1805.85 GiB (1,939,014,828,032 B)``): no three columns fit both in 80 without cutting
one of them mid-word. So each term takes two lines, the label with its value right-aligned
where both fit on one line, then the formula indented below; text wraps only between
words, and a label too long to share its line with the value puts the value on the
formula's line (or a line of its own).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term

HEADER = ("term, its formula below", "value")
FORMULA_INDENT = 4
"""Spaces before a formula, past its label's own indent."""
MIN_WIDTH = 60
"""Values of short lists still stand apart from their labels, aligned at this column."""


def term_value(term: Term) -> str:
    """Bytes in binary units with the exact count (``88.00 MiB (92,274,688 B)``); counts
    of anything else plainly (``7,247,757,312 elements``)."""
    value = term.value
    if term.unit != "B":
        return f"{value:,} {term.unit}"
    return f"{format_bytes(value)} ({value:,} B)" if abs(value) >= 1024 else f"{value} B"


def _wrap(text: str, width: int, indent: str) -> list[str]:
    """``text`` wrapped between words to ``width``, every line behind ``indent``; a word
    longer than the whole width (none of ours is) is the only thing ever cut."""
    room = max(width - len(indent), 8)
    lines = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
    return [indent + line for line in lines]


def _with_value(line: str, value: str, width: int) -> str | None:
    """``line`` with ``value`` right-aligned at ``width``, if both fit with two spaces."""
    gap = width - len(line) - len(value)
    return line + " " * gap + value if gap >= 2 else None


@dataclass(frozen=True, slots=True)
class TermList:
    """Every term of one computation, in order, under a bold title (a rich renderable)."""

    title: str
    terms: tuple[Term, ...]
    caption: str | None = None

    def texts(self) -> Iterator[str]:
        """Every string shown (the header, labels, formulas, values), for checks."""
        yield from HEADER
        for term in self.terms:
            yield from (term.label, term.formula, term_value(term))

    def _width(self, most: int) -> int:
        """As wide as its longest entry needs, at most the console's width."""
        needs = [MIN_WIDTH]
        for t in self.terms:
            needs.append(len(t.label) + 2 + len(term_value(t)))
            indent = len(t.label) - len(t.label.lstrip()) + FORMULA_INDENT
            needs.append(indent + len(t.formula))
        return min(most, max(needs))

    def lines(self, width: int) -> list[str]:
        """The entries as plain lines of at most ``width`` characters (header excluded)."""
        out: list[str] = []
        for t in self.terms:
            value = term_value(t)
            lead = t.label[: len(t.label) - len(t.label.lstrip())]
            head = _with_value(t.label, value, width)
            out += [head] if head is not None else _wrap(t.label.strip(), width, lead)
            formula = _wrap(t.formula, width, lead + " " * FORMULA_INDENT) if t.formula else []
            if head is None:
                last = _with_value(formula[0], value, width) if formula else None
                if last is not None:
                    formula[0] = last
                else:
                    formula.append(value.rjust(width))
            out += formula
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = self._width(options.max_width)
        yield Text(self.title, style="bold")
        header = _with_value(HEADER[0], HEADER[1], width) or HEADER[0]
        yield Text(header, style="bold")
        yield Text("─" * width)
        for line in self.lines(width):
            yield Text(line, no_wrap=True, overflow="ignore")
        if self.caption:
            yield Text(self.caption, style="dim")


def terms_table(title: str, terms: Iterable[Term], *, caption: str | None = None) -> TermList:
    """Every term of ``terms`` under ``title``; see :class:`TermList` for the layout."""
    return TermList(title=title, terms=tuple(terms), caption=caption)
