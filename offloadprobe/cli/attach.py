"""``offloadprobe attach``: measure every named offload call of an unmodified job."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help

HELP = """Run COMMAND (a script, python -m ..., torchrun ...) unchanged and measure every call
of the named functions (--phase, --preset) and every offloadprobe.phase block of the
job's own code, in every Python process of its tree: host peak over the call's start
and growth (the larger of its RSS and its process's own memory cgroup, which attach
reads), pinned and GPU bytes, duration, rank. The job's output, exit code and signals
pass through; the report goes to stderr after it ends.
Exit: 0 ok; 1 the job failed (its own status is in the report and --json), a process
escaped its cgroup or reset its peak, over budget, a named function not found or its
module never imported, nothing measured at all, or with --require-calls a phase never
called or a Python process not instrumented; 2 bad input (before the job starts);
128+N when attach itself was stopped by signal N (passed on to the job)."""


@app.command(
    "attach",
    help=HELP,
    context_settings={"allow_interspersed_args": False},
    no_args_is_help=True,
)
def attach_command(
    command: Annotated[
        list[str], typer.Argument(help="The job's command, after --.", show_default=False)
    ],
    phase: Annotated[
        list[str] | None,
        typer.Option(
            "--phase",
            help="NAME=MODULE:QUALNAME, a function or Class.method (repeat for more).",
        ),
    ] = None,
    preset: Annotated[
        list[str] | None,
        typer.Option(
            "--preset",
            help="A packaged group of phases: verl-megatron, megatron-core, "
            "torch-memory-saver, verl-fsdp (repeat for more).",
        ),
    ] = None,
    max_host_peak: Annotated[
        str | None,
        typer.Option(
            "--max-host-peak",
            help="Per call: host peak over the call's start (the larger of RSS and its "
            "cgroup), e.g. 40GiB, or 1.1x the device bytes the call moved (where measured).",
        ),
    ] = None,
    max_host_growth: Annotated[
        str | None,
        typer.Option(
            "--max-host-growth",
            help="Per call: host after less before (the larger of RSS and its cgroup), "
            "e.g. 1GiB or 1.0x.",
        ),
    ] = None,
    max_node_peak: Annotated[
        str | None,
        typer.Option("--max-node-peak", help="The job cgroup's peak, e.g. 1700GiB."),
    ] = None,
    require_calls: Annotated[
        bool,
        typer.Option(
            "--require-calls",
            help="Exit 1 when a named phase was never called, or a Python process (or a "
            "new image exec'd in one) ran without the bootstrap.",
        ),
    ] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write every call and summary as JSON.")
    ] = None,
    markdown_path: Annotated[
        Path | None, typer.Option("--markdown", help="Write the report as Markdown.")
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            help="Keep the job file and each process's JSON-lines stream in this folder "
            "(default: a temporary folder, removed).",
        ),
    ] = None,
    keep_torch_peaks: Annotated[
        bool,
        typer.Option(
            "--keep-torch-peaks",
            help="Do not reset torch's GPU peak counters at each call (the job's own "
            "max_memory_allocated stays as it was; a call's GPU peak is then known only "
            "where it set a new high).",
        ),
    ] = False,
    no_cgroup: Annotated[
        bool,
        typer.Option("--no-cgroup", help="Make no memory cgroup; the node peak is the tree's RSS."),
    ] = False,
    progress: Annotated[bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("attach"))] = True,
) -> None:
    from rich.console import Console

    from offloadprobe.attach import spec, verdict
    from offloadprobe.attach.report_json import attach_json
    from offloadprobe.attach.report_markdown import attach_markdown
    from offloadprobe.attach.report_table import render_attach
    from offloadprobe.attach.run import AttachJob, resolve_command, run_attached
    from offloadprobe.report.output import check_writable, write_json, write_text
    from offloadprobe.report.step_summary import append_step_summary, step_summary_path

    specs = spec.resolve(list(phase or []), list(preset or []))
    budgets = verdict.Budgets.parse(
        host_peak=max_host_peak, host_growth=max_host_growth, node_peak=max_node_peak
    )
    check_writable(json_path, "--json")
    check_writable(markdown_path, "--markdown")
    resolve_command(command)
    if records is not None and records.exists() and any(records.iterdir()):
        from offloadprobe.core.errors import UsageError

        raise UsageError(f"--records {records} is not empty: give a new or empty folder")
    out_dir = records or Path(tempfile.mkdtemp(prefix="offloadprobe-attach-"))
    try:
        record = run_attached(
            AttachJob(
                command=tuple(command),
                specs=specs,
                out_dir=out_dir,
                reset_gpu_peak=not keep_torch_peaks,
                require_calls=require_calls,
                use_cgroup=not no_cgroup,
            )
        )
    finally:
        if records is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    record = verdict.judge(record, budgets)
    if records is None:
        record = dataclasses.replace(record, out_dir=None)
    sys.stdout.flush()
    render_attach(record, Console(file=sys.stderr, color_system=None))
    if json_path is not None:
        write_json(attach_json(record), json_path)
    if markdown_path is not None:
        write_text(attach_markdown(record), markdown_path, "--markdown")
    if records is not None:
        print(f"kept the job's records in {records}", file=sys.stderr)
    if step_summary_path() is not None:
        append_step_summary("attach", attach_markdown(record))
    raise typer.Exit(verdict.exit_code(record))
