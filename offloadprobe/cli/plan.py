"""``offloadprobe plan``: project a scenario (or the probe model) without running anything.

Torch-free: the projection is arithmetic over megatron's buffer layout and each
strategy's declared host allocations (its descriptor's ``host_events``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.cli import app
from offloadprobe.cli.params import parameter, with_options
from offloadprobe.cli.progress import PROGRESS_FLAGS, quiet_verb_help
from offloadprobe.core import options as opts
from offloadprobe.core.errors import ExpectationMismatch, UsageError
from offloadprobe.report.documents import document
from offloadprobe.report.output import check_writable, write_json
from offloadprobe.report.reporters import render

EXTRA = [
    parameter(
        "scenario",
        Annotated[
            str | None,
            typer.Argument(
                help="A scenario file, or a packaged scenario's "
                "name (verl-6193); leave out with --probe. See offloadprobe scenarios."
            ),
        ],
        None,
    ),
    parameter(
        "probe",
        Annotated[
            bool,
            typer.Option(
                "--probe", help="Project offloadprobe's own probe model (see run's flags)."
            ),
        ],
        False,
    ),
    parameter(
        "terms",
        Annotated[
            bool,
            typer.Option(
                "--terms/--no-terms",
                help="After the verdicts, print the figures per rank, the DDP buffers by "
                "pipeline stage and the arithmetic of every figure (term tables).",
            ),
        ],
        False,
    ),
    parameter(
        "progress",
        Annotated[bool, typer.Option(PROGRESS_FLAGS, help=quiet_verb_help("plan"))],
        True,
    ),
    parameter(
        "json_path",
        Annotated[
            Path | None,
            typer.Option(
                "--json", help="Write the whole projection, every term included, to this JSON file."
            ),
        ],
        None,
    ),
]


@app.command("plan")
@with_options(opts.PLAN, EXTRA)
def plan_command(values: dict[str, Any]) -> None:
    """Project host peak, steady and pinned bytes per rank and node for every model
    strategy, and GPU bytes left per device for every optimizer strategy, against the
    scenario's limits (--terms: with the figures per rank and the arithmetic of every
    figure)."""
    from offloadprobe.scenarios import load_scenario
    from offloadprobe.scenarios.catalog import resolve

    json_path, terms = values.pop("json_path"), values.pop("terms")
    values.pop("progress")
    scenario, probe = values.pop("scenario"), values.pop("probe")
    check_writable(json_path, "--json")
    if probe == (scenario is not None):
        raise UsageError("give a scenario file or --probe, not both and not neither")
    mismatches: list[str] = []
    if scenario is not None:
        from offloadprobe.plan.scenario_plan import project_scenario

        plan = project_scenario(load_scenario(resolve(scenario)))
        mismatches = [
            f"{row.strategy} projected {row.outcome}, the scenario expects {row.expected}"
            for row in plan.strategies
            if row.expected is not None and row.expected != row.outcome
        ]
        doc = plan.to_dict()
    else:
        doc = _probe_plan(values).to_dict()
    doc["printed"] = {"terms": terms}
    render(document(doc), sys.stdout)  # what show prints of the saved file, by construction
    if json_path is not None:
        write_json(doc, json_path)
    if mismatches:
        raise ExpectationMismatch(f"{scenario}: " + "; ".join(mismatches))


def _probe_plan(values: dict[str, Any]) -> Any:
    from offloadprobe.core.devices import guess_device
    from offloadprobe.plan.probe import ProbePlan, probe_payload, probe_projection
    from offloadprobe.scenarios.schema import param_strategies

    requested = values["device"]
    device = requested if requested in ("cuda", "cpu") else guess_device(requested)
    cycles = values["cycles"]
    if cycles < 1:
        raise UsageError(f"--cycles must be at least 1, got {cycles}")
    model = opts.build_config(values).model
    rows = [
        probe_projection(model, name, emulated=device == "cpu", cycles=cycles)
        for name in param_strategies()
    ]
    return ProbePlan(
        model=model,
        device=device,
        cycles=cycles,
        payload_bytes=probe_payload(model),
        strategies=tuple(rows),
    )
