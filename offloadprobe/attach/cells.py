"""The columns of attach's tables, declared once for the terminal and for Markdown.

Every cell is rendered from a record (``records.py``); "n/a" is a figure this host could
not measure (a column that reads it on every row is dropped, see report/tables.py).
"""

from __future__ import annotations

from offloadprobe.attach.records import (
    MODULE_NEVER_IMPORTED,
    NOT_WRAPPED,
    Call,
    JobRecord,
    NodeSummary,
    PhaseGrowth,
    PhaseSummary,
    RankSummary,
)
from offloadprobe.core.units import format_bytes
from offloadprobe.report.tables import NOT_MEASURED, Column, Left

MAX_CALL_ROWS = 40
"""More calls than this: the calls table is left out of the terminal (all are in --json)."""


def size(n: int | None) -> str:
    return NOT_MEASURED if n is None else format_bytes(n)


def seconds(s: float) -> str:
    return f"{s:.3f}"


def who(call: Call | None) -> str:
    """``#2 r0 p4711``: the call's index, rank and pid."""
    if call is None:
        return NOT_MEASURED
    rank = f" r{call.rank}" if call.rank is not None else ""
    return f"#{call.index}{rank} p{call.pid}"


def rank_name(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _worst_peak(p: PhaseSummary) -> str:
    return size(p.worst.host_peak_bytes) if p.worst else NOT_MEASURED


PHASE_COLUMNS: list[Column[PhaseSummary]] = [
    Left("phase", lambda p: p.name),
    Column("calls", lambda p: str(p.calls), drop_if_unmeasured=False),
    Column("raised", lambda p: str(p.raised) if p.raised else "", drop_if_unmeasured=False),
    Column("worst peak", _worst_peak),
    Column("worst call", lambda p: who(p.worst)),
    Column("host after", lambda p: size(p.host_after_max_bytes)),
    Column("node peak", lambda p: size(p.node_peak_bytes)),
]
"""Host side: worst peak over the call's start, host after (the highest RSS a call left),
the job cgroup's peak at the last call's exit."""

DEVICE_COLUMNS: list[Column[PhaseSummary]] = [
    Left("phase", lambda p: p.name),
    Column("pinned after", lambda p: size(p.pinned_after_max_bytes)),
    Column("GPU left", lambda p: size(p.gpu_left_max_bytes)),
    Column(
        "GPU peak",
        lambda p: size(p.worst.gpu_allocated_peak_bytes if p.worst else None),
    ),
    Column("moved", lambda p: size(p.worst.device_moved_bytes if p.worst else None)),
]
"""Device side, where measured: highest pinned bytes and GPU allocated bytes a call left,
and the worst call's GPU peak and device bytes moved."""

CALL_COLUMNS: list[Column[Call]] = [  # a nested call's phase is marked "> " per level
    Left("phase", lambda c: "> " * c.depth + c.phase),
    Column("#", lambda c: str(c.index)),
    Column("rank", lambda c: rank_name(c.rank)),
    Column("pid", lambda c: str(c.pid)),
    Column("seconds", lambda c: seconds(c.seconds)),
    Column("peak", lambda c: size(c.host_peak_bytes)),
    Column("by", lambda c: c.host_peak_by or NOT_MEASURED, justify="left"),
    Column("growth", lambda c: size(c.host_growth_bytes)),
    Column("host after", lambda c: size(c.host_after_bytes)),
    Column("GPU after", lambda c: size(c.gpu_allocated_after_bytes)),
    Left("", lambda c: "raised" if c.raised else ""),
]

RANK_COLUMNS: list[Column[RankSummary]] = [
    Column("rank", lambda r: rank_name(r.rank)),
    Left("pid", lambda r: ",".join(str(p) for p in r.pids)),
    Column("calls", lambda r: str(r.calls)),
    Column("worst peak", lambda r: size(r.worst.host_peak_bytes if r.worst else None)),
    Left("worst call", lambda r: f"{r.worst.phase} #{r.worst.index}" if r.worst else "-"),
    Column("host after", lambda r: size(r.host_after_max_bytes)),
    Column("pinned", lambda r: size(r.pinned_after_max_bytes)),
    Column("GPU left", lambda r: size(r.gpu_left_max_bytes)),
]

NO_SPAN = "-"
"""A growth over one call: there is no first-to-last to take."""


def _growth(g: PhaseGrowth, value: int | None) -> str:
    return NO_SPAN if g.calls < 2 else size(value)


GROWTH_COLUMNS: list[Column[PhaseGrowth]] = [
    Left("phase", lambda g: g.phase),
    Column("rank", lambda g: rank_name(g.rank)),
    Left("pid", lambda g: ",".join(str(p) for p in g.pids)),
    Column("calls", lambda g: str(g.calls)),
    Column("host growth", lambda g: _growth(g, g.host_growth_bytes)),
    Column("pinned growth", lambda g: _growth(g, g.pinned_growth_bytes)),
]
"""Per phase and rank: RSS and pinned bytes after the last call less after the first."""

GROWTH_CAPTION = "growth: after the phase's last call less after its first, per rank"


def has_growth(record: JobRecord) -> bool:
    """Whether any phase was called more than once in a rank (a span to show)."""
    return any(g.calls > 1 for g in record.growth)


NODE_COLUMNS: list[Column[NodeSummary]] = [
    Left("node", lambda n: n.host),
    Column("processes", lambda n: str(n.processes)),
    Column("calls", lambda n: str(n.calls)),
    Column("node peak", lambda n: size(n.node_peak_bytes)),
    Left("measured by", lambda n: n.node_peak_method),
]


CALL_CAPTION = "peak: the call's highest RSS less its RSS at entry; growth: RSS after less before"
CALL_CAPTION_GROUPED = (
    "peak: the larger of the call's highest RSS and its process's cgroup's highest held "
    "bytes, each less its value at entry (by: which); growth: after less before, the "
    "larger of the two"
)


def call_caption(record: JobRecord) -> str:
    """The calls table's caption: with the cgroup view where any call has one."""
    grouped = any(c.host_peak_by is not None for c in record.calls)
    return CALL_CAPTION_GROUPED if grouped else CALL_CAPTION


def has_device(record: JobRecord) -> bool:
    """Whether any call measured pinned or GPU bytes."""
    return any(
        c.pinned_after_bytes is not None or c.gpu_allocated_after_bytes is not None
        for c in record.calls
    )


def job_status(record: JobRecord) -> str:
    """``exit 3``, or ``killed by signal 9 (status 137)``."""
    from offloadprobe.attach.verdict import job_status

    return job_status(record)


def headline(record: JobRecord, width: int = 80) -> list[str]:
    """The first lines: the job's status and duration, then its command (cut to fit)."""
    command = "command: " + " ".join(record.command)
    if len(command) > width:
        command = command[: width - 3] + "..."
    return [f"offloadprobe attach: {job_status(record)} after {record.seconds:.1f} s", command]


def status_lines(record: JobRecord) -> list[str]:
    """Everything after the tables, one finding a line: phases not called, processes not
    instrumented, breaches, budgets not applied, notes, and the verdict."""
    lines = [phase_line(p) for p in record.phases if p.calls == 0]
    for e in record.escaped:
        lines.append(
            f"escaped: pid {e.pid} left its memory cgroup {e.left} for {e.found_in} "
            f"({format_bytes(e.rss_bytes)} resident then; its memory since is in no "
            f"figure): {e.command}"
        )
    for group in record.peak_resets:
        lines.append(
            f"peak reset: the peak of cgroup {group} read lower than attach left it: a "
            "process of the job reset it, and a peak may be missing"
        )
    for u in record.uninstrumented:
        how = ", a new image exec'd without the bootstrap" if u.after_exec else ""
        lines.append(
            f"not instrumented: pid {u.pid} (parent {u.ppid}, seen in {u.seen_by}{how}): "
            f"{u.command}"
        )
    for b in record.breaches:
        lines.append(f"over budget: {b.line()}")
    lines.extend(f"not judged: {u}" for u in record.unjudged)
    lines.extend(f"note: {n}" for n in record.notes)
    lines.append(verdict_line(record))
    return lines


def phase_line(p: PhaseSummary) -> str:
    """One named phase that was not called, and why, naming its module and function."""
    module, _, function = p.target.partition(":")
    if p.status.startswith(NOT_WRAPPED):
        return f"not wrapped: {p.name} ({p.target}): {p.status.removeprefix(NOT_WRAPPED)}"
    if p.status == MODULE_NEVER_IMPORTED:
        return (
            f"{p.status}: {p.name} ({p.target}): no process of the job imported {module}, "
            f"where {function} was to be wrapped (check the module's name)"
        )
    return f"{p.status}: {p.name} ({p.target})"


def verdict_line(record: JobRecord) -> str:
    """``verdict: ok``, or what the verdict (``attach.verdict.outcome``) says."""
    from offloadprobe.attach.verdict import phrase

    return f"verdict: {phrase(record)}"
