"""``--trace``/``--plot``: start the sampler only when asked, and write what it drew."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.core.records import Report, RunRecord
from offloadprobe.core.units import format_bytes
from offloadprobe.measure.sampler import Sampler, sampler_for
from offloadprobe.measure.timeline import Timeline
from offloadprobe.report.output import check_writable
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
TIMELINE_ENV = "OFFLOADPROBE_TIMELINE"
"""How ``compare`` tells each child where to write its timeline (whatever its arguments)."""
TimelinePath = Annotated[
    Path | None,
    typer.Option(
        "--timeline",
        hidden=True,
        envvar=TIMELINE_ENV,
        help="Write the raw sampled timeline (JSON).",
    ),
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineOutputs:
    """What a verb was asked to draw; nothing samples unless one of them is set."""

    trace: Path | None = None
    plot: Path | None = None
    side: Path | None = None

    @property
    def wanted(self) -> bool:
        return any(p is not None for p in (self.trace, self.plot, self.side))

    def check(self) -> None:
        """Fail on bad paths (and a missing matplotlib) before any work starts."""
        if self.trace is not None:
            check_writable(self.trace, "--trace")
        if self.plot is not None:
            from offloadprobe.report.plot import check_plot_path

            check_writable(self.plot, "--plot")
            check_plot_path(self.plot)

    def sampler(self, device: str) -> Sampler | None:
        """A started sampler, or None when no output needs one."""
        if not self.wanted:
            return None
        return sampler_for(cuda=device == "cuda").start()

    def write_run(self, report: Report, timeline: Timeline | None) -> None:
        if timeline is None:
            return
        if self.side is not None:
            self.side.write_text(json.dumps(timeline.to_dict()) + "\n")
        run = report.runs[0] if report.runs else None
        row = TraceRow(pid=timeline.rank, label=_run_label(report, timeline),
                       run=run, timeline=timeline, emulated=report.emulated)  # fmt: skip
        if self.trace is not None:
            write_trace(trace_document([row], context=_context(report)), self.trace)
        if self.plot is not None:
            from offloadprobe.report.plot import plot_phases

            plot_phases([row], self.plot, title=_title(report, [row.label]),
                        payload=report.payload_bytes)  # fmt: skip

    def write_rows(self, rows: list[TraceRow], doc: dict[str, Any]) -> None:
        """``compare``: one process track (and plot overlay) per row."""
        report_like = _ReportView(doc)
        if self.trace is not None:
            write_trace(trace_document(rows, context=_context(report_like)), self.trace)
        if self.plot is not None:
            from offloadprobe.report.plot import plot_phases

            plot_phases(rows, self.plot, title=_title(report_like, [r.label for r in rows]),
                         payload=report_like.payload_bytes or 1)  # fmt: skip


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
    run = report.runs[0] if report.runs else None
    name = run.strategy if run else "run"
    if run and run.optimizer_strategy not in ("", "none"):
        name += f"+{run.optimizer_strategy}"
    return f"rank {timeline.rank}: {name}"


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


def compare_rows(labels: list[str], runs: list[RunRecord | None], folder: Path,
                 doc: dict[str, Any]) -> list[TraceRow]:  # fmt: skip
    """Each child's timeline side file (absent where the child died before writing it)."""
    rows = []
    for index, (label, run) in enumerate(zip(labels, runs, strict=True)):
        path = side_file(folder, index)
        timeline = Timeline.from_dict(json.loads(path.read_text())) if path.exists() else None
        rows.append(TraceRow(pid=index, label=label, run=run, timeline=timeline,
                             emulated=bool(doc.get("emulated"))))  # fmt: skip
    return rows


def side_file(folder: Path, index: int) -> Path:
    return folder / f"row-{index}.json"
