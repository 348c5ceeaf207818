"""``offloadprobe alloc-conf``: which pinned-allocator settings the installed torch has."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help

if TYPE_CHECKING:
    from offloadprobe.core.alloc_conf import PinnedSetting


def render(settings: list[PinnedSetting], torch_version: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=f"pinned-allocator settings, torch {torch_version}")
    table.add_column("setting", no_wrap=True)
    table.add_column("here", no_wrap=True)
    table.add_column("what it changes")
    for s in settings:
        table.add_row(s.key, "yes" if s.exists else "no", s.meaning)
    return table


@app.command("alloc-conf")
def alloc_conf_command(
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the list as JSON.")
    ] = None,
    progress: Annotated[
        bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("alloc-conf"))
    ] = True,
) -> None:
    """List the pinned-allocator settings (PYTORCH_ALLOC_CONF) the installed torch accepts."""
    from offloadprobe.core import extras

    extras.require("offloadprobe alloc-conf", (extras.TORCH,))
    import torch

    from offloadprobe.core.alloc_conf import cuda_build, pinned_settings
    from offloadprobe.core.records import SCHEMA_VERSION
    from offloadprobe.report.output import check_writable, write_text

    check_writable(json_path, "--json")
    settings = pinned_settings()
    console = Console()
    console.print(render(settings, torch.__version__))
    if settings and settings[0].checked_by == "torch's parser":
        note = "checked with torch's own parser"
    else:
        note = "keys read from torch's allocator libraries (its parser accepts any key here)"
        if not cuda_build():
            note = "CPU build, no pinned allocator: " + note
    console.print(f"{note}; pass them as `compare --alloc-conf KEY:VALUE`")
    if json_path is not None:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "alloc-conf",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "settings": [asdict(s) for s in settings],
        }
        write_text(json.dumps(doc, indent=2) + "\n", json_path, "--json")
