"""``offloadprobe repro SCENARIO``: a real, scaled-down reproduction on this machine."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli.progress import PROGRESS_FLAGS
from offloadprobe.core.errors import ExpectationMismatch, UsageError
from offloadprobe.core.units import parse_size
from offloadprobe.report.documents import document
from offloadprobe.report.output import check_writable, write_json
from offloadprobe.report.reporters import render
from offloadprobe.report.step_summary import append_step_summary, step_summary_path
from offloadprobe.scenarios import load_scenario
from offloadprobe.scenarios.catalog import resolve
from offloadprobe.scenarios.scenario import Scenario


@app.command("repro")
def repro_command(
    scenario: Annotated[
        str,
        typer.Argument(
            help="A scenario file, or a packaged scenario's name (ci-small); "
            "see offloadprobe scenarios."
        ),
    ],
    device: Annotated[str, typer.Option("--device", help="cuda, cpu or auto.")] = "auto",
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only this expected strategy (repeatable)."),
    ] = None,
    train_steps: Annotated[
        int | None,
        typer.Option(
            "--train-steps",
            help="Train steps per cycle in host-limit children (optimizer children: at least 1); "
            "default: the scenario's [repro] train_steps, else 0.",
        ),
    ] = None,
    cycles: Annotated[
        int | None,
        typer.Option("--cycles", help="Offload cycles (default: the scenario's [repro] cycles)."),
    ] = None,
    gpu_limit_floor: Annotated[
        str | None,
        typer.Option(
            "--gpu-limit-floor",
            help="GPU scenarios: give the children at least this device limit (for the probe's "
            "own training); the rollout claim grows with it, the scaled headroom stays.",
        ),
    ] = None,
    child_timeout: Annotated[
        float | None, typer.Option("--child-timeout", help="Seconds each child may run.")
    ] = None,
    cgroup: Annotated[
        bool,
        typer.Option(
            "--cgroup/--no-cgroup",
            help="Enforce the host limit in a real memory cgroup (else judge from VmHWM).",
        ),
    ] = True,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the whole repro to this JSON file.")
    ] = None,
    progress: Annotated[bool, typer.Option(PROGRESS_FLAGS, help="Say which strategy runs.")] = True,
) -> None:
    """Run each strategy the scenario names at the [repro] scale, in a fresh process each,
    under the scenario's limit scaled by the same factor, and compare with what it expects."""
    from offloadprobe.core import extras
    from offloadprobe.repro.reproduce import reproduce

    extras.require("offloadprobe repro")  # before anything else: the children import both
    check_writable(json_path, "--json")
    s = load_scenario(resolve(scenario))
    _check_up_front(s, only or (), cycles)
    status = Console(file=sys.stderr)
    repro = reproduce(
        s,
        device=device,
        only=only or (),
        train_steps=train_steps,
        cycles=cycles,
        gpu_limit_floor=parse_size(gpu_limit_floor, what="--gpu-limit-floor", allow_zero=True)
        if gpu_limit_floor
        else 0,
        timeout_s=child_timeout,
        use_cgroup=cgroup,
        on_start=lambda name: (
            status.print(f"repro: running {name}", highlight=False) if progress else None
        ),
        on_warning=lambda line: print(f"offloadprobe: warning: {line}", file=sys.stderr),
    )
    doc = repro.to_dict()
    saved = document(doc)
    render(saved, sys.stdout)  # what show prints of the saved file, by construction
    if json_path is not None:
        write_json(doc, json_path)
    if step_summary_path() is not None:
        from offloadprobe.report.markdown import render as markdown

        append_step_summary("repro", markdown(saved))
    if repro.mismatches:
        raise ExpectationMismatch(
            f"{s.name}: "
            + "; ".join(
                f"{o.strategy} expected {o.expected}, observed {o.observed} ({o.detail})"
                for o in repro.mismatches
            )
        )


def _check_up_front(s: Scenario, only: Sequence[str], cycles: int | None) -> None:
    """Before any child starts: ``--cycles`` where the scenario runs a sequence (its own
    steps), and each user strategy the run will use, read from its source (not imported:
    the children import it), as offloadprobe calls it."""
    from offloadprobe.engine.strategies.user_calls import check_unloaded
    from offloadprobe.repro.reproduce import selected

    sequence = s.repro.options.get("sequence") if s.repro is not None else None
    if cycles is not None and sequence is not None:
        raise UsageError(
            f"--cycles would be ignored: {s.path.name} [repro] sequence = {sequence!r} runs its "
            "own steps; drop --cycles (or the sequence)"
        )
    from offloadprobe.cli.strategies import check_served

    engine = str((s.repro.options.get("engine") if s.repro is not None else None) or "megatron")
    for e in selected(s, only):
        check_unloaded(e.strategy, flag=f"{s.path.name}: [expect]", optimizer=e.kind == "optimizer")
        optimizer = e.kind == "optimizer"
        try:  # a strategy of another engine: the scenario's words, exit 2
            check_served(
                engine, [] if optimizer else [e.strategy], [e.strategy] if optimizer else []
            )
        except UsageError as exc:
            raise UsageError(f"{s.path.name}: [expect] {exc}") from None
