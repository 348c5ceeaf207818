"""Rich output of ``run``: the summary block first, then the per-phase tables.

Host figures are over the host RSS just before the first offload. Offload and load rows
come first; train rows (the framework's own memory, outside every summary figure) follow
in their own section. GPU and pinned readings go to a second table, shown only where they
were measured, so each table fits 80 columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.text import Text

from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.records import PhaseRecord, Report, RunRecord
from offloadprobe.core.units import format_bytes, format_ratio
from offloadprobe.report.run_parts import (
    OPTIMIZER,
    PARAMETERS,
    is_model_owner,
    kept_parts,
    run_roles,
)
from offloadprobe.report.run_summary import label, summary_block, verdict
from offloadprobe.report.tables import NOT_MEASURED, Column, Left, column_table
from offloadprobe.report.world_table import world_table

TRAIN = "train"


@dataclass(frozen=True, slots=True)
class _Row:
    """A phase record with the run's zero (host baseline) and denominator (payload)."""

    rec: PhaseRecord
    base: int
    payload: int | None
    """The denominator of the multiples; None for a table in bytes only."""


def _host(value: int, row: _Row) -> str:
    delta = value - row.base
    if row.payload is None:  # bytes only: the report's multiples are the parts' own
        return format_bytes(delta)
    return f"{format_ratio(delta / row.payload if row.payload else 0.0)} {format_bytes(delta)}"


def _peak(row: _Row) -> str:
    sampled = "~" if row.rec.host.method != "vmhwm" else ""
    return _host(row.rec.host.host_peak, row) + sampled


def _bytes(value: int | None) -> str:
    return NOT_MEASURED if value is None else format_bytes(value)


HOST_COLUMNS: list[Column[_Row]] = [
    Column("cycle", lambda r: str(r.rec.cycle)),
    Left("phase", lambda r: r.rec.phase),
    Column("time", lambda r: f"{r.rec.seconds:.3f} s"),
    Column("GB/s", lambda r: f"{r.rec.gbps:.1f}" if r.rec.gbps and r.rec.bytes_moved else ""),
    Column("host peak", _peak),
    Column("host after", lambda r: _host(r.rec.host.host_rss_after, r)),
]

DEVICE_COLUMNS: list[Column[_Row]] = [
    Column("cycle", lambda r: str(r.rec.cycle)),
    Left("phase", lambda r: r.rec.phase),
    Column("RssShmem", lambda r: format_bytes(r.rec.host.shmem_after)),
    Column("pinned", lambda r: _bytes(_pinned(r.rec))),
    Column("GPU alloc after", lambda r: _bytes(r.rec.gpu and r.rec.gpu.allocated_after)),
    Column("GPU peak", lambda r: _bytes(r.rec.gpu and r.rec.gpu.allocated_peak)),
]


def _pinned(rec: PhaseRecord) -> int | None:
    """Page-locked bytes by CUPTI where it records, else PyTorch's host allocator's."""
    if rec.pinned is None:
        return None
    return rec.pinned.reserved_after if rec.pinned.locked_after is None else rec.pinned.locked_after


def _rows(run: RunRecord, *, multiples: bool = True) -> list[_Row]:
    """Offload/load rows in run order, then the train rows."""
    payload = run.payload_bytes if multiples else None
    rows = [_Row(rec, run.baseline_host_bytes, payload) for rec in run.phases]
    return sorted(rows, key=lambda r: r.rec.phase == TRAIN)


def _head(run: RunRecord) -> str:
    """A table's title names the row: its own name (``--strategy NAME=SPEC``), else the
    parameter strategy its description is of."""
    return run.label if run.label_override else run.strategy


def _description(run: RunRecord) -> str:
    """What the strategy is; a named row's title leaves its spec out (the row's name
    stands for it, and a long ``module:offload,load`` would split at 80 columns)."""
    if run.label_override and run.strategy in run.description:
        return " ".join(run.description.replace(run.strategy, "").split()) or "user strategy"
    return run.description


def _numbered(columns: list[Column[_Row]], run: RunRecord) -> list[Column[_Row]]:
    """A sequence's phases are numbered by step, not by cycle."""
    if not run.sequence:
        return columns
    return [Column("step", lambda r: str(r.rec.cycle)), *columns[1:]]


def _payload_word(run: RunRecord) -> str:
    """The engine's own word for what the payload is (``param_data``, ``sharded_param``)."""
    for fact in run.residency:
        for owner, role in fact.roles.items():
            if role == "parameters":
                return owner
    return "param_data"


def phase_table(run: RunRecord, *, gpu: bool, multiples: bool = True) -> RenderableType:
    """One row per cycle (or step) and phase; host figures over the pre-offload baseline,
    as bytes and (``multiples``) as multiples of the payload."""
    x = f"x = multiple of the payload ({format_bytes(run.payload_bytes)} of {_payload_word(run)}); "
    return column_table(
        _numbered(HOST_COLUMNS, run),
        _rows(run, multiples=multiples),
        title=f"{_head(run)}: {_description(run)}",
        caption=(
            f"{x if multiples else ''}host over the RSS before the first offload "
            f"({format_bytes(run.baseline_host_bytes)}); train rows, below the gap, are "
            "the framework's own memory and count in no summary figure"
        ),
        sections=lambda r: r.rec.phase == TRAIN,
    )


def device_table(run: RunRecord) -> RenderableType | None:
    """Pinned and GPU readings per phase; None where nothing of it was measured."""
    rows = _rows(run)
    if all(r.rec.gpu is None and r.rec.pinned is None for r in rows):
        return None
    return column_table(
        _numbered(DEVICE_COLUMNS, run),
        rows,
        title=f"{_head(run)}: pinned and GPU memory after each phase",
        caption=(
            "pinned: page-locked host bytes by CUPTI's records (any allocator)"
            if any(r.rec.pinned and r.rec.pinned.locked_after is not None for r in rows)
            else "pinned: PyTorch's host allocator's bytes (CUPTI is not recording)"
        ),
        sections=lambda r: r.rec.phase == TRAIN,
    )


@dataclass(frozen=True, slots=True)
class _Owner:
    name: str
    first: int
    last: int
    part: str


RESIDENCY_COLUMNS: list[Column[_Owner]] = [
    Left("owner", lambda o: o.name),
    Left("part", lambda o: o.part),
    Column("after first offload", lambda o: format_bytes(o.first)),
    Column("after last offload", lambda o: format_bytes(o.last)),
]


def residency_table(run: RunRecord, *, gpu: bool) -> RenderableType | None:
    """What each owner left on the device after an offload; None if nothing unexpected.

    A part of which nothing moved stays on the device by design and is not listed: the
    summary says so in words.
    """
    offloads = [rec.left_on_device for rec in run.phases if rec.left_on_device is not None]
    if not offloads or run.summary is None:  # a run that stopped early: its verdict says why
        return None

    kept = kept_parts(run)
    roles = run_roles(run)

    def part(owner: str) -> str:
        return PARAMETERS if is_model_owner(owner, roles) else OPTIMIZER

    def expected(owner: str) -> bool:
        return part(owner) in kept

    names = {k for left in offloads for k, v in left.items() if v and not expected(k)}
    if not names:
        return None
    owners = [_Owner(k, offloads[0].get(k, 0), offloads[-1].get(k, 0), part(k)) for k in names]
    owners.sort(key=lambda o: (-o.last, o.name))
    where = "GPU" if gpu else "device (emulated)"
    return column_table(
        RESIDENCY_COLUMNS, owners, title=f"{label(run)}: left on {where} after offload"
    )


def summary_line(run: RunRecord, judged: Verdict | None = None) -> Text:
    """One line per run for logs: the whole's figures and the verdict (``judged``, the
    invocation's, which knows the budgets; else the record's own)."""
    text = Text()
    text.append(f"{label(run)}: ", style="bold")
    s = run.summary
    words = verdict(run, judged)
    if s is None:
        text.append(words, style="red")
        return text
    text.append(
        f"host peak {format_ratio(s.host_peak_x)} the bytes moved "
        f"({format_bytes(s.host_peak_bytes)}), steady host {format_ratio(s.steady_host_x)} "
        f"({format_bytes(s.steady_host_bytes)}); "
    )
    ok = judged.ok if judged is not None else s.integrity_ok
    text.append(words, style="green" if ok else "bold red")
    return text


def render_report(report: Report, console: Console) -> None:
    """Per run: the summary block, the phase tables, what was left; then the environment."""
    gpu = not report.emulated
    judged: list[Verdict | None] = list(report.verdicts)
    judged += [None] * (len(report.runs) - len(judged))
    for run, verdict_of_run in zip(report.runs, judged, strict=False):
        console.print(summary_block(run, verdict_of_run))
        if report.emulation_note:
            console.print(Text(report.emulation_note, style="yellow"))
        console.print()
        console.print(phase_table(run, gpu=gpu))
        for extra in (device_table(run), residency_table(run, gpu=gpu)):
            if extra is not None:
                console.print(extra)
        if run.world is not None:
            console.print()
            console.print(world_table(run.world))
    notes = sorted({n for run in report.runs for n in run.notes} - {report.emulation_note})
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)
    lines = [Text(f"device {report.device}; {versions}", style="dim")]
    lines += [Text(note, style="dim") for note in notes]
    console.print(Group(*lines))
