"""``show RESULT.json --trace T --plot P``: the plot drawn again from what was recorded.

The samples come from the trace (``report/trace_read.py``), every exact figure (peaks,
pinned bytes, what a strategy page-locked itself) from the result's run records: the
same inputs ``run --plot`` and ``compare --plot`` draw from, read back from their files.
Each trace track is matched to the run record of the same label.
"""

from __future__ import annotations

import json
from pathlib import Path

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import run_from_dict
from offloadprobe.report.output import announce, check_writable
from offloadprobe.report.trace import TraceRow


def check(trace: Path, plot: Path) -> None:
    """Fail before anything is read or drawn: a trace that exists, a plot path we can write."""
    from offloadprobe.report.plot import check_plot_path

    if not trace.is_file():
        raise UsageError(f"--trace {trace}: no such file")
    check_writable(plot, "--plot")
    check_plot_path(plot)


def replot(result: Path, trace: Path, plot: Path) -> None:
    from offloadprobe.cli.timeline import _ReportView, _title
    from offloadprobe.report.plot import plot_phases
    from offloadprobe.report.trace_read import read_trace

    doc = json.loads(result.read_text())
    runs = {r.get("label"): r for r in doc.get("runs") or []}
    timelines = read_trace(trace)
    missing = sorted(set(timelines) - set(runs))
    if missing and not (len(timelines) == 1 and len(runs) == 1):
        raise UsageError(
            f"--trace {trace}: no run labelled {missing[0]!r} in {result}; give the trace "
            "the same run or compare wrote"
        )
    if missing:  # one track, one run: a run's trace is labelled by its worker
        runs = {next(iter(timelines)): next(iter(runs.values()))}
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
