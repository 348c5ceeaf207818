"""The frame around a plot's panels: title, legend and footnote, each in a band of its
own, sized in inches so that none covers another and nothing is cut at the edges.

matplotlib places a figure legend and a suptitle independently: with a long title the
legend (``loc="upper right"``) sat on it, and a footnote wider than the figure ran off
its edge. Here the title and footnote are wrapped to the figure's width first, the bands
are reserved from their line counts, and the panels get what is left.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

TITLE_PT, LEGEND_PT, FOOT_PT = 10.0, 8.0, 8.0
LINE = 1.45
"""Line height as a multiple of the font size."""
CHAR = 0.56
"""Average character width as a multiple of the font size (DejaVu Sans)."""
MARGIN_IN = 0.08


def wrap(text: str, width_in: float, points: float) -> list[str]:
    """``text`` in lines that fit ``width_in`` inches at ``points`` (between words)."""
    chars = max(int((width_in - 2 * MARGIN_IN) * 72 / (points * CHAR)), 20)
    return textwrap.wrap(text, chars, break_on_hyphens=False) or [""]


def _band(lines: int, points: float) -> float:
    """Inches ``lines`` lines of ``points`` take."""
    return lines * points * LINE / 72


@dataclass(frozen=True, kw_only=True, slots=True)
class Frame:
    """Where the bands went, in figure fractions (0 at the bottom), for checks."""

    title: tuple[float, float]
    legend: tuple[float, float]
    panels: tuple[float, float]
    foot: tuple[float, float]


def frame(fig: Any, *, title: str, footnote: str, handles: list, labels: list[str]) -> Frame:
    """Title on top, the legend under it, the footnote at the bottom, the panels between
    (``tight_layout`` within the rest)."""
    width, height = fig.get_size_inches()
    title_lines = wrap(title, width, TITLE_PT)
    foot_lines = wrap(footnote, width, FOOT_PT)
    longest = max((len(label) for label in labels), default=1) + 6
    per_row = max(1, min(len(labels), int((width - 0.5) * 72 / (LEGEND_PT * CHAR * longest))))
    legend_rows = math.ceil(len(labels) / per_row) if labels else 0
    top = 1 - MARGIN_IN / height
    title_h = _band(len(title_lines), TITLE_PT) / height
    legend_h = (_band(legend_rows, LEGEND_PT) + (0.12 if legend_rows else 0)) / height
    foot_h = _band(len(foot_lines), FOOT_PT) / height
    bottom = MARGIN_IN / height
    fig.text(MARGIN_IN / width, top, "\n".join(title_lines), fontsize=TITLE_PT, va="top", ha="left")
    legend_top = top - title_h
    if labels:
        fig.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(MARGIN_IN / width, legend_top),
            ncols=per_row,
            fontsize=LEGEND_PT,
            frameon=False,
            borderaxespad=0,
            borderpad=0.2,
        )
    fig.text(
        MARGIN_IN / width, bottom, "\n".join(foot_lines), fontsize=FOOT_PT, va="bottom", ha="left"
    )
    panels = (bottom + foot_h + 0.1 / height, legend_top - legend_h)
    fig.tight_layout(rect=(0, panels[0], 1, panels[1]))
    return Frame(
        title=(legend_top, top),
        legend=(legend_top - legend_h, legend_top),
        panels=panels,
        foot=(bottom, bottom + foot_h),
    )
