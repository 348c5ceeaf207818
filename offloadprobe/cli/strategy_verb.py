"""``offloadprobe strategies``: every registered strategy, one line each."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help
from offloadprobe.report.strategy_list import strategy_lines, strategy_table


@app.command("strategies")
def strategies_command(
    progress: Annotated[
        bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("strategies"))
    ] = True,
) -> None:
    """List every strategy, one line each; name one in run, compare or plan."""
    Console().print(strategy_table(strategy_lines()))
