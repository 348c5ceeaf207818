"""``offloadprobe show RESULT.json``: a saved result, rendered as its verb printed it.

A run's or comparison's rows, and an attached job, are judged again from their facts
(``core.rejudge``, ``attach.rejudge``), never printed on the stored outcome's word.
Exit codes: 0 when the file reads and every row's stored outcome is its facts' verdict
(whatever that verdict: ``show`` renders, the verb gated); 1 when a row's stored outcome
contradicts its facts (one line each, on stderr; the row shows the facts' verdict); 2
for a file that is not a result, or a fact no record holds (a NaN figure), in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help


def _formats() -> str:
    from offloadprobe.report.reporters import REPORTERS

    return ", ".join(REPORTERS.names())


@app.command("show")
def show_command(
    result: Annotated[
        Path,
        typer.Argument(help="A file a verb's --json wrote (run, compare, plan, repro, attach)."),
    ],
    format: Annotated[
        str, typer.Option("--format", "-f", help=f"How to render it: {_formats()}.")
    ] = "table",
    progress: Annotated[bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("show"))] = True,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            metavar="PATH",
            help="The trace the same run or compare wrote (--trace): with --plot, draw it again.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="PATH",
            help="Draw memory over time again from --trace and this result's exact figures.",
        ),
    ] = None,
) -> None:
    """Render a saved run, comparison, plan, repro or attach (no torch, nothing runs)."""
    from offloadprobe.report.documents import load, rejudged
    from offloadprobe.report.reporters import REPORTERS, render

    REPORTERS.check(format)  # a misspelt format fails before the file is read
    if (trace is None) != (plot is None):
        from offloadprobe.core.errors import UsageError

        raise UsageError("--trace and --plot go together: the trace to draw, the image to write")
    if trace is not None and plot is not None:
        from offloadprobe.cli import replot

        doc = replot.check(result, trace, plot)
    saved, contradicted = rejudged(load(result), str(result))
    render(saved, sys.stdout, format=format)
    if trace is not None and plot is not None:
        replot.replot(doc, result, trace, plot)
    for line in contradicted:
        print(f"offloadprobe: error: {line}", file=sys.stderr)
    if contradicted:
        raise SystemExit(1)
