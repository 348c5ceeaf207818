"""Rich tables rendered from run records."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from offloadprobe.core.records import PartSummary, PhaseRecord, Report, RunRecord, Verdict
from offloadprobe.core.units import format_bytes, format_gbps, format_ratio


def _delta(value: int | None, base: int, payload: int) -> str:
    if value is None:
        return "n/a"
    delta = value - base
    return f"{format_bytes(delta)} ({format_ratio(delta / payload)})"


def phase_table(run: RunRecord, *, gpu: bool) -> Table:
    """One row per cycle and phase; host figures are over the pre-offload baseline."""
    table = Table(
        title=escape(f"{run.label}: {run.description}"),
        caption=(
            f"x = multiple of the payload, {format_bytes(run.payload_bytes)} of param_data; "
            f"host figures over the host RSS before the first offload "
            f"({format_bytes(run.baseline_host_bytes)})"
        ),
        title_justify="left",
    )
    columns = ["cycle", "phase", "time", "rate", "host peak", "host after"]
    if gpu:
        columns += ["RssShmem", "pinned reserved", "GPU alloc after", "GPU peak"]
    for name in columns:
        table.add_column(name, justify="left" if name == "phase" else "right")
    for rec in run.phases:
        table.add_row(*_phase_cells(rec, run.baseline_host_bytes, run.payload_bytes, gpu))
    return table


def residency_table(run: RunRecord, *, gpu: bool) -> Table | None:
    """One row per offload, one "left on GPU after offload" column per owner left behind."""
    keys = _left_keys(run)
    offloads = [rec for rec in run.phases if rec.left_on_device is not None]
    if not offloads:
        return None
    where = "GPU" if gpu else "device (emulated)"
    table = Table(title=f"{run.label}: left on {where} after offload", title_justify="left")
    table.add_column("cycle", justify="right")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("total", justify="right")
    for rec in offloads:
        left = rec.left_on_device or {}
        cells = [format_bytes(left.get(key, 0)) for key in keys]
        table.add_row(str(rec.cycle), *cells, format_bytes(sum(left.values())))
    return table


def _left_keys(run: RunRecord) -> list[str]:
    """Owners that any offload left on the device, largest first."""
    totals: dict[str, int] = {}
    for rec in run.phases:
        for key, value in (rec.left_on_device or {}).items():
            totals[key] = max(totals.get(key, 0), value)
    return sorted((k for k, v in totals.items() if v), key=lambda k: -totals[k])


def _phase_cells(rec: PhaseRecord, base: int, payload: int, gpu: bool) -> list[str]:
    cells = [
        str(rec.cycle),
        rec.phase,
        f"{rec.seconds:.3f} s",
        format_gbps(rec.gbps) if rec.bytes_moved else "",
        _delta(rec.host.host_peak, base, payload) + ("~" if rec.host.method != "vmhwm" else ""),
        _delta(rec.host.host_rss_after, base, payload),
    ]
    if gpu:
        cells += [
            format_bytes(rec.host.shmem_after),
            format_bytes(rec.pinned.reserved_after) if rec.pinned else "n/a",
            format_bytes(rec.gpu.allocated_after) if rec.gpu else "n/a",
            format_bytes(rec.gpu.allocated_peak) if rec.gpu else "n/a",
        ]
    return cells


def _part_line(name: str, part: PartSummary) -> str:
    return (
        f"  {name} ({format_bytes(part.moved_bytes)} moved): host peak "
        f"{format_ratio(part.host_peak_x)}, steady {format_ratio(part.steady_host_x)}, "
        f"offload {format_gbps(part.offload_gbps)}, load {format_gbps(part.load_gbps)}\n"
    )


def summary_line(run: RunRecord, verdict: Verdict | None = None) -> Text:
    """Per run: its verdict, then each part over its own bytes, then the whole."""
    s = run.summary
    text = Text()
    text.append(f"{run.label}: ", style="bold")
    if verdict is not None:
        text.append(verdict.line(), style="green" if verdict.ok else "bold red")
        text.append("\n")
    if s is None:
        if verdict is None:
            text.append(f"stopped early: {run.failure or 'no offload/load completed'}", style="red")
        return text
    if verdict is None:
        text.append("\n")
    parts = [("parameters", s.params), ("optimizer state", s.optimizer)]
    for name, part in parts:
        if part is not None:
            text.append(_part_line(name, part))
    moved = s.moved_bytes if s.moved_bytes is not None else run.payload_bytes
    text.append(
        f"  whole ({format_bytes(moved)} moved): host peak {format_ratio(s.host_peak_x)} "
        f"({format_bytes(s.host_peak_bytes)}), steady {format_ratio(s.steady_host_x)} "
        f"({format_bytes(s.steady_host_bytes)}), pinned reserved "
        f"{format_bytes(s.pinned_reserved_bytes)}, GPU left after offload "
        f"{format_bytes(s.gpu_left_after_offload_bytes)}, offload {format_gbps(s.offload_gbps)}, "
        f"load {format_gbps(s.load_gbps)}\n"
    )
    left = s.left_after_offload_bytes_by_key
    if left is not None:
        listed = ", ".join(f"{k} {format_bytes(v)}" for k, v in left.items() if v) or "nothing"
        text.append(f"  left on device after offload: {listed}\n")
    text.append("  ")
    if s.integrity_ok:
        text.append("round trip bit-exact", style="green")
    else:
        text.append("ROUND TRIP CORRUPTED", style="bold red")
    return text


def render_report(report: Report, console: Console) -> None:
    """Print every run's phase table, then the notes and one summary line per run."""
    for run in report.runs:
        console.print(phase_table(run, gpu=not report.emulated))
        residency = residency_table(run, gpu=not report.emulated)
        if residency is not None:
            console.print(residency)
    notes = sorted({n for run in report.runs for n in run.notes})
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)
    lines = [Text(f"device {report.device}; {versions}", style="dim")]
    lines += [Text(note, style="yellow") for note in notes]
    verdicts = report.verdicts or [None] * len(report.runs)
    lines += [summary_line(run, v) for run, v in zip(report.runs, verdicts, strict=True)]
    console.print(Group(*lines))
