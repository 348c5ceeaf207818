"""The side-by-side comparison as plain cells, shared by the rich and Markdown reporters."""

from __future__ import annotations

from offloadprobe.compare.comparison import Comparison, ComparisonRow
from offloadprobe.core.records import PartSummary, RunSummary
from offloadprobe.core.units import format_bytes, format_ratio

HEADERS = [
    "strategy",
    "host peak",
    "vs base",
    "steady host",
    "pinned reserved",
    "GPU left after offload",
    "offload GB/s (first / steady)",
    "load GB/s (first / steady)",
    "verdict",
]


def _rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _vs(value: float, base: float | None) -> str:
    if base is None or base <= 0:
        return "n/a"
    return f"{value / base:.2f}x"


def row_cells(row: ComparisonRow, base: RunSummary | None) -> list[str]:
    """One candidate's cells; a child that died shows only its verdict."""
    s = row.run.summary if row.run is not None else None
    if s is None:
        return [row.candidate.label, *["-"] * (len(HEADERS) - 2), row.verdict.line()]
    return [
        row.candidate.label,
        f"{format_ratio(s.host_peak_x)} ({format_bytes(s.host_peak_bytes)})",
        _vs(s.host_peak_x, base.host_peak_x if base else None),
        f"{format_ratio(s.steady_host_x)} ({format_bytes(s.steady_host_bytes)})",
        format_bytes(s.pinned_reserved_bytes),
        format_bytes(s.gpu_left_after_offload_bytes),
        f"{_rate(s.first_offload_gbps)} / {_rate(s.offload_gbps)}",
        f"{_rate(s.first_load_gbps)} / {_rate(s.load_gbps)}",
        row.verdict.line(),
    ]


PART_HEADERS = [
    "strategy",
    "params peak",
    "params steady",
    "params vs base",
    "optimizer peak",
    "optimizer steady",
    "optimizer vs base",
]


def _part_cells(part: PartSummary | None, base: PartSummary | None) -> list[str]:
    if part is None:
        return ["-", "-", "-"]
    return [
        format_ratio(part.host_peak_x),
        format_ratio(part.steady_host_x),
        _vs(part.host_peak_x, base.host_peak_x if base else None),
    ]


def parts_cells(comparison: Comparison) -> list[list[str]] | None:
    """Each part over its own bytes, "vs base" against the baseline's same part; None
    when no row moved optimizer state (then the main table says it all)."""
    runs = [r.run.summary if r.run else None for r in comparison.rows]
    if not any(s is not None and s.optimizer is not None for s in runs):
        return None
    base = comparison.baseline_summary()
    out = []
    for row, s in zip(comparison.rows, runs, strict=True):
        params = s.params if s else None
        optimizer = s.optimizer if s else None
        out.append([
            row.candidate.label,
            *_part_cells(params, base.params if base else None),
            *_part_cells(optimizer, base.optimizer if base else None),
        ])  # fmt: skip
    return out


def comparison_cells(comparison: Comparison) -> list[list[str]]:
    """Every row's cells, in run order."""
    base = comparison.baseline_summary()
    return [row_cells(row, base) for row in comparison.rows]


def caption(comparison: Comparison) -> str:
    """What the numbers are over, and which settings all rows share."""
    first = next((r.run for r in comparison.rows if r.run is not None), None)
    payload = format_bytes(first.payload_bytes) if first else "n/a"
    return (
        f"payload {payload}; x = multiple of the bytes each row moves (parameters plus "
        f"optimizer state) over the host RSS before the first offload; 'vs base' = host peak "
        f"x / {comparison.baseline}'s, part by part; each row ran in a fresh process"
    )
