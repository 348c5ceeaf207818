"""``offloadprobe plan``: project a scenario (or the probe model) without running anything."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli import options as opt
from offloadprobe.core.errors import ExpectationMismatch, UsageError
from offloadprobe.report.output import check_writable, write_json
from offloadprobe.report.plan_table import render_plan, render_probe
from offloadprobe.scenarios import load_scenario
from offloadprobe.scenarios.catalog import resolve


@app.command("plan")
def plan_command(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="A scenario file, or a packaged scenario's name (verl-6193); leave out "
            "with --probe. See offloadprobe scenarios."
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option("--probe", help="Project offloadprobe's own probe model (see run's flags)."),
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            help="--probe: cuda, cpu (the CPU emulation) or auto (cuda where available, "
            "as run does).",
        ),
    ] = "auto",
    cycles: Annotated[int, typer.Option("--cycles", help="--probe: offload cycles.")] = 3,
    payload: opt.Payload = None,
    layers: opt.Layers = opt.DEFAULT.num_layers,
    hidden: opt.Hidden = opt.DEFAULT.hidden_size,
    heads: opt.Heads = opt.DEFAULT.num_attention_heads,
    vocab: opt.Vocab = opt.DEFAULT.vocab_size,
    seq_length: opt.SeqLength = opt.DEFAULT.seq_length,
    terms: Annotated[
        bool, typer.Option("--terms/--no-terms", help="Print the arithmetic of every figure.")
    ] = True,
    json_path: opt.JsonPath = None,
) -> None:
    """Project host peak, steady and pinned bytes per rank and node for every model
    strategy, and GPU bytes left per device for every optimizer strategy, against the
    scenario's limits. Every number is printed with its terms."""
    from offloadprobe.plan.probe import ProbePlan, probe_payload, probe_projection
    from offloadprobe.plan.scenario_plan import project_scenario
    from offloadprobe.scenarios.schema import param_strategies

    check_writable(json_path, "--json")
    console = Console()
    mismatches: list[str] = []
    if probe == (scenario is not None):
        raise UsageError("give a scenario file or --probe, not both and not neither")
    if scenario is not None:
        plan = project_scenario(load_scenario(resolve(scenario)))
        render_plan(plan, console, terms=terms)
        doc = plan.to_dict()
        mismatches = [
            f"{row.strategy} projected {row.outcome}, the scenario expects {row.expected}"
            for row in plan.strategies
            if row.expected is not None and row.expected != row.outcome
        ]
    else:
        if device not in ("cuda", "cpu", "auto"):
            raise UsageError(f"--device must be cuda, cpu or auto for --probe, got {device!r}")
        if device == "auto":
            from offloadprobe.engine.runtime.session import resolve_device

            device = resolve_device(device)
        if cycles < 1:
            raise UsageError(f"--cycles must be at least 1, got {cycles}")
        model = opt.model_config(
            layers=layers,
            hidden=hidden,
            heads=heads,
            vocab=vocab,
            seq_length=seq_length,
            payload=payload,
        )
        rows = [
            probe_projection(model, k, emulated=device == "cpu", cycles=cycles)
            for k in param_strategies()
        ]
        where = "CPU emulation" if device == "cpu" else "CUDA"
        title = (
            f"probe model {model}: payload {probe_payload(model):,} B; {where}, {cycles} "
            "cycles; host figures over the host RSS before the first offload"
        )
        render_probe(rows, console, title=title, terms=terms)
        doc = ProbePlan(
            model=model,
            device=device,
            cycles=cycles,
            payload_bytes=probe_payload(model),
            strategies=tuple(rows),
        ).to_dict()
    if json_path is not None:
        write_json(doc, json_path)
    if mismatches:
        raise ExpectationMismatch(f"{scenario}: " + "; ".join(mismatches))
