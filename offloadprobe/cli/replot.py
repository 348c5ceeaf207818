"""``show RESULT.json --trace T --plot P``: the plot drawn again from what was recorded.

The samples come from the trace (``report/trace_read.py``), every exact figure (peaks,
pinned bytes, what a strategy page-locked itself) from the result's run records: the
same inputs ``run --plot`` and ``compare --plot`` draw from, read back from their files.
Each trace track is matched to the run record of the same label.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import run_from_dict
from offloadprobe.report.output import announce, check_writable
from offloadprobe.report.trace import TraceRow


def check(result: Path, trace: Path, plot: Path) -> dict[str, Any]:
    """Fail before anything is printed or drawn: a result with runs (a run's or a
    compare's), a trace that exists, a plot path we can write."""
    from offloadprobe.report.plot import check_plot_path

    try:
        doc = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{result}: not a result offloadprobe wrote ({exc})") from exc
    if not isinstance(doc, dict) or not doc.get("runs"):
        raise UsageError(
            f"{result}: no runs to draw (a plan or repro result?); --trace and --plot take "
            "the JSON of the run or compare that wrote the trace"
        )
    if not trace.is_file():
        raise UsageError(f"--trace {trace}: no such file")
    check_writable(plot, "--plot")
    check_plot_path(plot)
    return doc


def replot(doc: dict[str, Any], result: Path, trace: Path, plot: Path) -> None:
    """Draw ``plot`` from ``trace`` and ``doc`` (``result``'s JSON, as ``check`` read it)."""
    from offloadprobe.cli.timeline import _ReportView, _title
    from offloadprobe.report.plot import plot_phases
    from offloadprobe.report.trace_read import read_trace

    runs = {r.get("label"): r for r in doc.get("runs") or []}
    read = read_trace(trace)
    timelines, peaks = read.timelines, read.peaks
    missing = sorted(set(timelines) - set(runs))
    if missing and not (len(timelines) == 1 and len(runs) == 1):
        raise UsageError(
            f"--trace {trace}: no run labelled {missing[0]!r} in {result}; give the trace "
            "the same run or compare wrote"
        )
    if missing:  # one track, one run: a run's trace is labelled by its worker
        runs = {next(iter(timelines)): next(iter(runs.values()))}
    for label, timeline in timelines.items():
        _same_run(trace, result, label, timeline, runs[label], peaks.get(label, {}))
    rows = [
        TraceRow(
            pid=timeline.rank,
            label=label,
            run=run_from_dict(runs[label]),
            timeline=timeline,
            emulated=bool(doc.get("emulated")),
        )
        for label, timeline in timelines.items()
    ]
    view = _ReportView(doc)
    plot_phases(
        rows, plot, title=_title(view, [r.label for r in rows]), payload=view.payload_bytes or 1
    )
    announce(plot, "--plot")


def _same_run(
    trace: Path,
    result: Path,
    label: str,
    timeline: Any,
    run: dict[str, Any],
    peaks: dict[tuple[int, str], int],
) -> None:
    """A track belongs to its run only if it has the run's phases and each phase's exact
    host peak, which the trace's phase slices carry from the same records."""
    if not timeline.spans:
        return  # a row that left no timeline (a killed worker): nothing to draw over
    recorded = {
        (p["cycle"], p["phase"]): p["host"]["peak"]
        for c in run.get("cycles") or []
        for p in c["phases"]
    }
    traced = {k: v for k, v in peaks.items() if k[1] != "construction"}
    if traced != recorded:
        raise UsageError(
            f"--trace {trace}: track {label!r} is not of the run in {result} (its phases or "
            "their exact host peaks differ); give the trace the same run or compare wrote"
        )
