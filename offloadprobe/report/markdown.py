"""A Markdown table of a comparison, ready to paste into a pull request."""

from __future__ import annotations

from offloadprobe.compare.comparison import Comparison
from offloadprobe.report.comparison_cells import (
    HEADERS,
    PART_HEADERS,
    caption,
    comparison_cells,
    parts_cells,
)


def comparison_markdown(comparison: Comparison, *, environment: str = "") -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(HEADERS), line(["---"] * len(HEADERS))]
    out += [line(cells) for cells in comparison_cells(comparison)]
    parts = parts_cells(comparison)
    if parts is not None:
        out += ["", line(PART_HEADERS), line(["---"] * len(PART_HEADERS))]
        out += [line(cells) for cells in parts]
    out.append("")
    out.append(caption(comparison) + (f"; {environment}" if environment else "") + ".")
    return "\n".join(out) + "\n"
