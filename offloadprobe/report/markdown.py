"""A Markdown table of a comparison, ready to paste into a pull request."""

from __future__ import annotations

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import (
    MARKDOWN_COLUMNS,
    PART_COLUMNS,
    caption,
    part_rows,
    rows,
)


def comparison_markdown(comparison: Comparison, *, environment: str = "") -> str:
    """Every column in one table, each row's full verdict, and the caption below."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line([c.header for c in MARKDOWN_COLUMNS]), line(["---"] * len(MARKDOWN_COLUMNS))]
    out += [line([c.cell(r) for c in MARKDOWN_COLUMNS]) for r in rows(comparison)]
    parts = part_rows(comparison)
    if parts:
        out += ["", line([c.header for c in PART_COLUMNS]), line(["---"] * len(PART_COLUMNS))]
        out += [line([c.cell(p) for c in PART_COLUMNS]) for p in parts]
    out.append("")
    out.append(caption(comparison) + (f"; {environment}" if environment else "") + ".")
    return "\n".join(out) + "\n"
