"""``offloadprobe scenarios``: the scenario files shipped with offloadprobe."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help
from offloadprobe.report.tables import Left, column_table
from offloadprobe.scenarios import load_scenario
from offloadprobe.scenarios.catalog import packaged


@app.command("scenarios")
def scenarios_command(
    progress: Annotated[
        bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("scenarios"))
    ] = True,
) -> None:
    """List the packaged scenarios; name one in plan or repro (offloadprobe plan verl-6193)."""
    sources = [(path.stem, load_scenario(path, packaged=True).source) for path in packaged()]
    rows = [(stem, source.title if source is not None else "") for stem, source in sources]
    columns = [Left("name", lambda r: r[0]), Left("source", lambda r: r[1])]
    console = Console()
    console.print(column_table(columns, rows))
    console.print(f"files in {packaged()[0].parent}" if rows else "no packaged scenarios")
