"""``offloadprobe plan``: project a scenario (or the probe model) without running anything.

Torch-free: the projection is arithmetic over megatron's buffer layout and each
strategy's declared host allocations (its descriptor's ``host_events``). A strategy that
declares none (the user's own) is measured instead: ``plan --probe --strategy SPEC``
runs it once on the probe model in a worker, as ``run`` does (this process still
imports no torch), and replays what that run measured (``plan.measured``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.cli import app
from offloadprobe.cli.params import parameter, with_options
from offloadprobe.cli.progress import PROGRESS_FLAGS
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
        "strategies",
        Annotated[
            list[str] | None,
            typer.Option(
                "--strategy",
                "-s",
                help="With --probe: also run this strategy once on the probe model, as "
                "offloadprobe run --strategy does, and show what that run measured next to "
                "the projections (its figures hold for the probe's size only). Your own "
                "(mypkg.offload:offload,load, name=spec names the row) or a built-in name. "
                "Repeatable.",
            ),
        ],
        None,
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
        Annotated[
            bool,
            typer.Option(PROGRESS_FLAGS, help="Show a progress bar while a --strategy row runs."),
        ],
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
    figure). With --probe --strategy SPEC: SPEC run once on the probe, its figures measured."""
    from offloadprobe.scenarios import load_scenario
    from offloadprobe.scenarios.catalog import resolve

    json_path, terms = values.pop("json_path"), values.pop("terms")
    show = values.pop("progress")
    scenario, probe = values.pop("scenario"), values.pop("probe")
    specs = values.pop("strategies") or []
    check_writable(json_path, "--json")
    if (values.get("engine") or "megatron") == "fsdp2":
        doc = _shard_plan(values, scenario, specs)
        doc["printed"] = {"terms": terms}
        render(document(doc), sys.stdout)
        if json_path is not None:
            write_json(doc, json_path)
        return
    if probe == (scenario is not None):
        raise UsageError("give a scenario file or --probe, not both and not neither")
    if specs and not probe:
        raise UsageError(
            "--strategy runs a strategy on the probe model: add --probe (a scenario's "
            "strategies are its [expect] keys)"
        )
    if specs:
        from offloadprobe.core import extras

        extras.require("offloadprobe plan --probe --strategy")  # it runs the strategy
    mismatches: list[str] = []
    judged: list[Any] = []
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
        probe_plan = _probe_plan(values, specs, show=show)
        doc = probe_plan.to_dict()
        judged = [(r.strategy, r.verdict, []) for r in probe_plan.measured]
    doc["printed"] = {"terms": terms}
    render(document(doc), sys.stdout)  # what show prints of the saved file, by construction
    if json_path is not None:
        write_json(doc, json_path)
    if mismatches:
        raise ExpectationMismatch(f"{scenario}: " + "; ".join(mismatches))
    if judged:
        from offloadprobe.cli.budget_report import enforce

        enforce(judged)  # a measured row that failed exits as run does


def _probe_plan(values: dict[str, Any], specs: list[str], *, show: bool = False) -> Any:
    from offloadprobe.core.devices import guess_device
    from offloadprobe.plan.probe import ProbePlan, probe_payload, probe_projection
    from offloadprobe.scenarios.schema import param_strategies

    named = _named_specs(specs, values.get("engine") or "megatron")
    requested = values["device"]
    device = requested if requested in ("cuda", "cpu") else guess_device(requested)
    cycles = values["cycles"]
    if cycles < 1:
        raise UsageError(f"--cycles must be at least 1, got {cycles}")
    model = opts.build_config(values).model
    rows = [
        probe_projection(model, name, emulated=device == "cpu", cycles=cycles)
        for name in param_strategies("megatron")
    ]
    measured = _measured(values, named, device=device, show=show) if named else ()
    return ProbePlan(
        model=model,
        device=device,
        cycles=cycles,
        payload_bytes=probe_payload(model),
        strategies=tuple(rows),
        measured=measured,
    )


def _shard_plan(values: dict[str, Any], scenario: Any, specs: list[str]) -> dict[str, Any]:
    """``plan --engine fsdp2``: the ranks' shard layout and verl FSDP2's pinned bytes."""
    from offloadprobe.plan.shard_plan import project_shards

    if scenario is not None or specs:
        raise UsageError(
            "plan --engine fsdp2 projects the preset's shard layout: drop the scenario and "
            "--strategy (measure a row with offloadprobe run --engine fsdp2)"
        )
    cfg = opts.build_config(values, strategy="exact")
    shards = cfg.parallel.shards or max(1, values.get("nproc_per_node") or 1)
    rank = cfg.parallel.shard_rank if values.get("shard_rank") else None
    return project_shards(cfg.model.preset or "plain", cfg.model.num_layers, shards, rank).to_dict()


def _named_specs(specs: list[str], engine: str) -> list[tuple[str | None, str]]:
    """Each ``--strategy`` as (row name or None, spec), checked as ``run`` checks them
    (a misspelt name fails here, with the nearest one), every row's name once."""
    from offloadprobe.cli.strategies import check_strategies, split_label

    named = [split_label(s) for s in specs]
    # torch-free: a user's module is read, not imported (its worker imports it)
    check_strategies(
        [spec for _, spec in named], [], model_place="--strategy {}", load=False, engine=engine
    )
    labels = [name or spec for name, spec in named]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise UsageError(f"row {twice[0]!r} is given twice: name rows apart with name=strategy")
    return named


def _measured(
    values: dict[str, Any], named: list[tuple[str | None, str]], *, device: str, show: bool
) -> tuple[Any, ...]:
    """One run of each strategy on the probe model, in a fresh worker each, exactly as
    ``offloadprobe run --strategy SPEC`` with the same flags; each row replays its run."""
    from offloadprobe.cli.fit import check_fits
    from offloadprobe.cli.progress import phase_progress
    from offloadprobe.core.world import check_trainable
    from offloadprobe.isolation.rows import measure
    from offloadprobe.isolation.supervisor import framed_output
    from offloadprobe.plan.measured import measured_row

    configs = [
        opts.build_config(values, strategy=spec, optimizer_strategy="none", label=name)
        for name, spec in named
    ]
    for cfg in configs:  # bad input exits 2 before any worker starts
        check_trainable(cfg.model, cfg.parallel)
    check_fits(  # the user's modules are imported in the workers only: this stays torch-free
        configs[0].model,
        strategies=[(cfg.strategy, "none") for cfg in configs],
        optimizer=configs[0].optimizer,
        device=device,
        force=False,
        load_user=False,
    )
    rows = []
    for (name, spec), cfg in zip(named, configs, strict=True):
        with phase_progress(name or spec, cfg, show=show) as on_phase:
            row = measure(cfg, device=device, on_phase=on_phase)
        sys.stderr.write(framed_output(row.outcome))
        rows.append(
            measured_row(
                name=name, spec=spec, device=row.report.device, run=row.run, verdict=row.verdict
            )
        )
    return tuple(rows)
