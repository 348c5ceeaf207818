"""The block ``run`` leads with: its verdict, then one row per part, then rates.

Everything here is rendered from a ``RunRecord``; the figures per part come from
:func:`offloadprobe.report.run_parts.parts`.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.records import RunRecord, RunSummary
from offloadprobe.core.units import format_bytes, format_ratio
from offloadprobe.core.verdicts import judge
from offloadprobe.report.engine_readings import engine_reading_lines
from offloadprobe.report.run_parts import OPTIMIZER, PARAMETERS, Part, left_owners, parts
from offloadprobe.report.tables import NOT_MEASURED, Column, Left, column_table


def label(run: RunRecord) -> str:
    """Both strategies, ``lazy + legacy``, or the row's own name."""
    return run.label


def verdict_parts(run: RunRecord, judged: Verdict | None = None) -> tuple[str, str | None]:
    """The verdict as a short phrase for the head line, and its detail (None if none).

    ``judged`` is the invocation's verdict for the run, which also knows the budgets;
    without one the record alone is judged, by the same rule (``core.verdicts.judge``).
    """
    if judged is None:
        judged, _ = judge(run)
    if judged.ok:
        return "ok, round trip bit-exact", None
    return judged.kind, judged.line().removeprefix(f"{judged.kind}: ") or None


def verdict(run: RunRecord, judged: Verdict | None = None) -> str:
    """The whole verdict on one line: the short phrase, or its detail where there is one."""
    short, detail = verdict_parts(run, judged)
    if detail is None:
        return short
    return detail if detail.startswith(short) else f"{short}: {detail}"


def _x_bytes(x: float | None, nbytes: int | None) -> str:
    if nbytes is None:
        return "in 'both'"
    if x is None:
        return format_bytes(nbytes)
    return f"{format_ratio(x)} {format_bytes(nbytes)}"


def _left(part: Part) -> str:
    if part.left is None:
        return NOT_MEASURED
    if not part.left:
        return "0 B"
    return format_bytes(part.left) + (" (kept)" if part.kept else " LEFT")


def _moves(part: Part) -> str:
    if part.moves == 0:
        return "not moved"
    return format_bytes(part.moves)


def _host(p: Part, x: float | None, nbytes: int | None) -> str:
    if p.within:
        return f"in '{p.within}'"
    return _x_bytes(x, nbytes) if p.moves else "-"


PART_COLUMNS: list[Column[Part]] = [
    Left("part", lambda p: p.name),
    Column("moves", _moves),
    Column("host peak", lambda p: _host(p, p.host_peak_x, p.host_peak)),
    Column("steady host", lambda p: _host(p, p.steady_x, p.steady)),
    Column("left on device", _left),
]


MEASURED_CAPTION = (
    "x = multiple of the bytes the part moves; a part's host figures add up the RSS "
    "changes in its own offload and load phases (train phases count for neither)"
)
SHARED_CAPTION = (
    "x = multiple of the bytes the part moves; host over the RSS before the first "
    "offload, in offload and load phases"
)


def parts_table(run: RunRecord) -> RenderableType:
    """One row per part; x = a multiple of the bytes that part moves."""
    s = run.summary
    measured = s is not None and (s.params is not None or s.optimizer is not None)
    return column_table(
        PART_COLUMNS, parts(run), caption=MEASURED_CAPTION if measured else SHARED_CAPTION
    )


def _rate(first: float | None, steady: float | None) -> str:
    if steady is None:
        return NOT_MEASURED
    first_text = "" if first is None else f" (first cycle {first:.1f})"
    return f"{steady:.1f} GB/s{first_text}"


def detail_lines(run: RunRecord) -> list[str]:
    """Sentences under the summary table: rates, pinned, GPU, what is left and why."""
    s = run.summary
    if s is None:
        return []
    lines = [
        f"bandwidth: offload {_rate(s.first_offload_gbps, s.offload_gbps)}, "
        f"load {_rate(s.first_load_gbps, s.load_gbps)}"
    ]
    moving = [p for p in parts(run) if p.moves and p.offload_gbps is not None]
    moving = [p for p in moving if p.name in (PARAMETERS, OPTIMIZER)]
    if len(moving) > 1:
        lines += [
            f"  {p.name}: offload {_rate(None, p.offload_gbps)}, load {_rate(None, p.load_gbps)}"
            for p in moving
        ]
    if s.held_while_training_bytes is not None:
        held = format_bytes(s.held_while_training_bytes)
        x = f"{s.held_while_training_x:.2f}x, " if s.held_while_training_x is not None else ""
        lines.append(f"host held while training (after the loads): {x}{held}")
        lines += _by_cycle(s)
    if s.pinned_reserved_bytes is not None:
        lines.append(_pinned_line(s))
    lines += engine_reading_lines(run)
    if s.gpu_left_after_offload_bytes is not None:
        lines.append(
            "GPU allocated after the last offload, over the pre-model baseline: "
            f"{format_bytes(s.gpu_left_after_offload_bytes)}"
        )
    for part in parts(run):
        if part.note:
            lines.append(part.note)
    lines += checkpoint_lines(run)
    for part in parts(run):
        if part.name not in (PARAMETERS, OPTIMIZER) or part.kept or not part.left or part.within:
            continue
        model = part.name == PARAMETERS
        who = run.strategy if model else run.optimizer_strategy
        lines.append(f"{who} left on the device: {', '.join(left_owners(run, model=model))}")
    return lines


def _by_cycle(s: RunSummary) -> list[str]:
    """Held after each cycle's loads, where it changed across the cycles by more than 5%
    of the bytes moved (a residue that grows: glibc keeping freed copies)."""
    held = s.held_by_cycle_bytes
    moved = s.moved_bytes or 0
    if len(held) < 2 or not moved or max(held) - min(held) <= moved // 20:
        return []
    cells = ", ".join(f"{h / moved:.2f}x" for h in held)
    return [f"  by cycle: {cells} (a residue that changes across cycles)"]


def checkpoint_lines(run: RunRecord) -> list[str]:
    """One sentence per ``checkpoint`` step: what it wrote, its host transient (peak over
    the phase start) and what stayed resident after it."""
    lines = []
    for p in run.phases:
        if p.phase != "checkpoint":
            continue
        start = p.host.host_rss_before
        peak, rest = p.host.host_peak - start, p.host.host_rss_after - start
        lines.append(
            f"checkpoint at step {p.cycle}: {format_bytes(p.bytes_moved)} written with "
            f"torch.distributed.checkpoint, then removed; host {format_bytes(peak)} over its "
            f"start at peak, {'+' if rest >= 0 else ''}{format_bytes(rest)} resident after"
        )
    return lines


def summary_block(run: RunRecord, judged: Verdict | None = None) -> Group:
    """Verdict line, the parts table, then the detail sentences."""
    head = Text()
    head.append(f"{label(run)}: ", style="bold")
    short, detail = verdict_parts(run, judged)
    head.append(short, style="green" if short.startswith("ok") else "bold red")
    items: list = [head]
    if detail is not None:
        items.append(Text(detail, style="red"))
    if run.summary is not None:
        items.append(parts_table(run))
        items += [Text(line) for line in detail_lines(run)]
    return Group(*items)


def _pinned_line(s: RunSummary) -> str:
    """The pinned figure, saying what it counts; on CUPTI, how the two sources compare."""
    pinned = format_bytes(s.pinned_reserved_bytes or 0)
    if s.pinned_source != "cupti" or s.pinned_recorded_bytes is None:
        return (
            f"pinned after the last offload: {pinned} (PyTorch's host allocator, plus "
            "what the strategies declare they page-locked; CUPTI would see any allocator)"
        )
    recorded = s.pinned_recorded_bytes
    line = f"pinned after the last offload: {pinned} (page-locked by any allocator, CUPTI)"
    if (s.pinned_reserved_bytes or 0) > recorded:
        line += (
            f"; CUPTI recorded {format_bytes(recorded)}: the rest is PyTorch's pinned "
            "blocks and what the strategies declared they page-locked"
        )
    return line
