"""Rich tables rendered from run records."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from offloadprobe.core.records import PhaseRecord, Report, RunRecord
from offloadprobe.core.units import format_bytes, format_gbps, format_ratio


def _delta(value: int | None, base: int, payload: int) -> str:
    if value is None:
        return "n/a"
    delta = value - base
    return f"{format_bytes(delta)} ({format_ratio(delta / payload)})"


def phase_table(run: RunRecord, *, gpu: bool) -> Table:
    """One row per cycle and phase; host figures are over the pre-offload baseline."""
    table = Table(
        title=escape(f"{run.strategy}: {run.description}"),
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
    table = Table(title=f"{run.strategy}: left on {where} after offload", title_justify="left")
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


def summary_line(run: RunRecord) -> Text:
    """The one-line verdict per strategy."""
    s = run.summary
    text = Text()
    text.append(f"{run.strategy}: ", style="bold")
    if run.not_offloaded:
        text.append(f"{run.not_offloaded}, ", style="bold red")
    if s is None:
        text.append(f"stopped early: {run.failure or 'no offload/load completed'}", style="red")
        return text
    text.append(
        f"host peak {format_ratio(s.host_peak_x)} payload ({format_bytes(s.host_peak_bytes)}), "
        f"steady host {format_ratio(s.steady_host_x)} ({format_bytes(s.steady_host_bytes)}), "
        f"pinned reserved {format_bytes(s.pinned_reserved_bytes)}, "
        f"GPU left after offload {format_bytes(s.gpu_left_after_offload_bytes)}, "
        f"offload {format_gbps(s.offload_gbps)}, load {format_gbps(s.load_gbps)}, "
    )
    left = s.left_after_offload_bytes_by_key
    if left is not None:
        listed = ", ".join(f"{k} {format_bytes(v)}" for k, v in left.items() if v) or "nothing"
        text.append(f"left on device after offload: {listed}, ")
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
    lines += [summary_line(run) for run in report.runs]
    console.print(Group(*lines))
