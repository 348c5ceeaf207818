"""``--trace``/``--plot``: start the sampler only when asked, and write what it drew."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.core.records import Report, RunRecord
from offloadprobe.core.units import format_bytes
from offloadprobe.measure.timeline import Timeline
from offloadprobe.report.output import announce, check_writable
from offloadprobe.report.trace import TraceRow, trace_document, write_trace

TracePath = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Write a Chrome/Perfetto trace (JSON): phases with their exact readings, and "
        "memory sampled at about 1 kHz. Open in ui.perfetto.dev.",
    ),
]
PlotPath = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Draw the memory timeline to a PNG or SVG (needs offloadprobe[plot]).",
    ),
]


def output_parameters() -> list:
    """``--trace`` and ``--plot`` as verb parameters (``cli.params``)."""
    from offloadprobe.cli.params import parameter

    return [parameter("trace", TracePath, None), parameter("plot", PlotPath, None)]


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineOutputs:
    """What a verb was asked to draw; nothing samples unless one of them is set."""

    trace: Path | None = None
    plot: Path | None = None

    @property
    def wanted(self) -> bool:
        return any(p is not None for p in (self.trace, self.plot))

    def check(self) -> None:
        """Fail on bad paths (and a missing matplotlib) before any work starts."""
        if self.trace is not None:
            check_writable(self.trace, "--trace")
        if self.plot is not None:
            from offloadprobe.report.plot import check_plot_path

            check_writable(self.plot, "--plot")
            check_plot_path(self.plot)

    def write_run(self, report: Report, drawn: dict[str, Any] | None) -> None:
        """``run``: the one worker's timeline (what it sampled, as its JSON)."""
        if drawn is None:
            return
        timeline = Timeline.from_dict(drawn)
        run = report.runs[0] if report.runs else None
        row = TraceRow(
            pid=timeline.rank,
            label=_run_label(report, timeline),
            run=run,
            timeline=timeline,
            emulated=report.emulated,
        )
        if self.trace is not None:
            write_trace(trace_document([row], context=_context(report)), self.trace)
        if self.plot is not None:
            from offloadprobe.report.plot import plot_phases

            plot_phases(
                [row], self.plot, title=_title(report, [row.label]), payload=report.payload_bytes
            )
            announce(self.plot, "--plot")

    def write_rows(self, rows: list[TraceRow], doc: dict[str, Any]) -> None:
        """``compare``: one process track (and plot overlay) per row."""
        report_like = _ReportView(doc)
        if self.trace is not None:
            write_trace(trace_document(rows, context=_context(report_like)), self.trace)
        if self.plot is not None:
            from offloadprobe.report.plot import plot_phases

            plot_phases(
                rows,
                self.plot,
                title=_title(report_like, [r.label for r in rows]),
                payload=report_like.payload_bytes or 1,
            )
            announce(self.plot, "--plot")


@dataclass(frozen=True, slots=True)
class _ReportView:
    """The few report fields titles need, from a comparison's JSON document."""

    doc: dict[str, Any]

    @property
    def payload_bytes(self) -> int:
        return int(self.doc.get("payload_bytes") or 0)

    @property
    def emulated(self) -> bool:
        return bool(self.doc.get("emulated"))

    @property
    def device(self) -> str:
        return str(self.doc.get("device") or "")

    @property
    def versions(self) -> dict:
        return self.doc.get("versions") or {}


def _run_label(report: Report, timeline: Timeline) -> str:
    """The row's label (its own name, or both strategies), as every table calls it."""
    run = report.runs[0] if report.runs else None
    name = run.label if run else "run"
    return f"rank {timeline.rank}: {name}" if timeline.rank else name


def _title(report: Any, labels: list[str]) -> str:
    where = (
        "CPU emulation (device buffers inside host RSS, no pinned memory)"
        if (report.emulated)
        else report.device
    )
    return f"{', '.join(labels)} · payload {format_bytes(report.payload_bytes)} · {where}"


def _context(report: Any) -> dict[str, Any]:
    return {
        "device": report.device,
        "emulated": report.emulated,
        "payload_bytes": report.payload_bytes,
        "versions": report.versions,
    }


def compare_rows(
    labels: list[str],
    runs: list[RunRecord | None],
    drawn: list[dict[str, Any] | None],
    doc: dict[str, Any],
) -> list[TraceRow]:
    """Each row's timeline (None where its worker died before writing one)."""
    rows = []
    for index, (label, run, data) in enumerate(zip(labels, runs, drawn, strict=True)):
        timeline = Timeline.from_dict(data) if data is not None else None
        rows.append(
            TraceRow(
                pid=index,
                label=label,
                run=run,
                timeline=timeline,
                emulated=bool(doc.get("emulated")),
            )
        )
    return rows
