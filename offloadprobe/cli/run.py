"""``offloadprobe run``: one strategy's offload/load cycles, measured in a worker process.

This process is the parent: it never imports torch. It starts the worker (or, with
``--nproc-per-node``, torchrun's launcher and its ranks), shows progress from the
worker's phase log, judges the record, prints the verdict first, then what the worker
itself printed, framed, and exits with the verdict's code.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.cli import app
from offloadprobe.cli.budget_report import enforce, row_payload
from offloadprobe.cli.fit import check_fits
from offloadprobe.cli.params import parameter, with_options
from offloadprobe.cli.progress import phase_progress
from offloadprobe.cli.strategies import (
    check_strategies,
    check_strategy_options,
    model_help,
    optimizer_help,
    split_label,
)
from offloadprobe.cli.timeline import TimelineOutputs, output_parameters
from offloadprobe.core import extras, option_budgets
from offloadprobe.core import options as opts
from offloadprobe.core.devices import guess_device
from offloadprobe.core.engines import engine as engine_info
from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import row_label
from offloadprobe.core.regression import check_payloads, check_rows
from offloadprobe.core.units import parse_size
from offloadprobe.core.world import check_trainable, under_torchrun
from offloadprobe.isolation.rows import Row, measure
from offloadprobe.isolation.supervisor import framed_output
from offloadprobe.report.documents import document
from offloadprobe.report.output import check_writable, write_json
from offloadprobe.report.reporters import render
from offloadprobe.report.step_summary import append_step_summary, step_summary_path
from offloadprobe.repro.host_limit import host_limited

EXTRA = [
    parameter(
        "strategy",
        Annotated[
            str | None,
            typer.Option(
                "--strategy",
                "-s",
                help=model_help() + " Default: the engine's fix (lazy; fsdp2: exact).",
            ),
        ],
        None,
    ),
    parameter(
        "optimizer_strategy",
        Annotated[str, typer.Option("--optimizer-strategy", help=optimizer_help())],
        "none",
    ),
    parameter(
        "json_path",
        Annotated[
            Path | None,
            typer.Option(
                "--json", help="Write every reading, the budgets and the verdict to this JSON file."
            ),
        ],
        None,
    ),
    parameter(
        "progress",
        Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")],
        True,
    ),
    *output_parameters(),
]


@app.command("run")
@with_options(opts.RUN, EXTRA)
def run_command(values: dict[str, Any]) -> None:
    """Run offload/load cycles of one strategy and print what each phase cost."""
    extras.require("offloadprobe run")  # before anything else: the workers import both
    json_path, trace, plot = values.pop("json_path"), values.pop("trace"), values.pop("plot")
    show = values.pop("progress")
    check_writable(json_path, "--json")
    outputs = TimelineOutputs(trace=trace, plot=plot)
    outputs.check()
    engine = values.get("engine") or "megatron"
    label, strategy = split_label(values.pop("strategy") or engine_info(engine).default_strategy)
    optimizer_strategy = values.pop("optimizer_strategy")
    check_strategies([strategy], [optimizer_strategy], engine=engine)  # misspelt: fails here
    nproc, nnodes = values.pop("nproc_per_node"), values.pop("nnodes")
    endpoint, timeout, force = (
        values.pop("rdzv_endpoint"),
        values.pop("timeout"),
        values.pop("force"),
    )
    host_limit = values.pop("host_limit")
    limit = parse_size(host_limit, what="--host-limit") if host_limit is not None else None
    parsed = option_budgets.budgets({k: values.pop(k) for k in opts.BUDGET_NAMES})
    for line in check_rows(
        parsed.budgets, [row_label(strategy, optimizer_strategy, engine, label)]
    ):
        print(f"offloadprobe: {line}", file=sys.stderr)
    cfg = opts.build_config(
        values, strategy=strategy, optimizer_strategy=optimizer_strategy, label=label
    )
    check_strategy_options([strategy], cfg.strategy_options)  # before any worker starts
    ranks = nproc * nnodes if not under_torchrun() else 2
    check_payloads(
        parsed.budgets,
        {row_label(strategy, optimizer_strategy, engine, label): row_payload(cfg, ranks)},
    )
    device = guess_device(cfg.device)
    check_trainable(cfg.model, cfg.parallel)
    if nproc < 1 or nnodes < 1:
        raise UsageError("--nproc-per-node and --nnodes must be at least 1")
    ranks = nproc > 1 or nnodes > 1
    if under_torchrun() and (outputs.wanted or ranks):
        raise UsageError(
            "under torchrun, offloadprobe is one rank: drop --nproc-per-node/--nnodes (torchrun "
            "starts the ranks) and --trace/--plot (they record one process)"
        )
    if nnodes > 1 and not endpoint:
        raise UsageError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node")
    if ranks and outputs.wanted:
        raise UsageError("--trace/--plot record one process: drop them with several ranks")
    if limit is not None and (ranks or under_torchrun()):
        raise UsageError(
            "--host-limit limits one worker: for a node of ranks use repro with a node "
            "scenario (its limit holds the node's cgroup)"
        )
    if ranks:
        cfg.parallel.dp(nproc * nnodes)  # exit 2 before any rank starts
    elif under_torchrun():
        import os

        cfg.parallel.dp(int(os.environ["WORLD_SIZE"]))
    elif not cfg.parallel.is_single:
        raise UsageError(
            "--tp/--pp/--ep/--cp/--vpp need several ranks: add --nproc-per-node N "
            "(or start offloadprobe under torchrun)"
        )
    if not under_torchrun():
        check_fits(
            cfg.model,
            strategies=[(strategy, optimizer_strategy)],
            optimizer=cfg.optimizer,
            device=device,
            force=force,
            ranks=nproc,
            model_parallel=cfg.parallel.model_parallel,
        )
    row = _measure(
        cfg,
        device=device,
        budgets=parsed.budgets,
        nproc=nproc,
        nnodes=nnodes,
        endpoint=endpoint,
        timeout=timeout,
        show=show,
        timeline=outputs.wanted,
        host_limit=limit,
    )
    if under_torchrun() and _rank() != 0:  # rank 0 reports for every rank
        sys.stderr.write(framed_output(row.outcome))
        raise SystemExit(row.outcome.exit_code if row.outcome.exit_code >= 0 else 1)
    report = replace(row.report, budgets=parsed.budget_words)
    doc = report.to_dict()
    saved = document(doc)
    render(saved, sys.stdout)  # what show prints of the saved file, by construction
    sys.stderr.write(framed_output(row.outcome))
    if json_path is not None:
        write_json(doc, json_path)
    if outputs.wanted and row.outcome.timeline is not None:
        outputs.write_run(report, row.outcome.timeline)
    if step_summary_path() is not None:
        from offloadprobe.report.markdown import render as markdown

        append_step_summary("run", markdown(saved))
    enforce([(row.label, row.verdict, row.breaches)])


def _rank() -> int:
    import os

    return int(os.environ.get("RANK", "0") or "0")


def _measure(
    cfg: Any,
    *,
    device: str,
    budgets: list[Any],
    nproc: int,
    nnodes: int,
    endpoint: str | None,
    timeout: float | None,
    show: bool,
    timeline: bool,
    host_limit: int | None = None,
) -> Row:
    """The row: one worker (under ``host_limit`` where given), or torchrun's launcher with
    the node's ranks in one cgroup."""
    if show and (nproc > 1 or nnodes > 1):
        print(
            f"offloadprobe: starting {nproc} rank(s) on this node through torchrun's launcher",
            file=sys.stderr,
        )
    label = row_label(cfg.strategy, cfg.optimizer_strategy, cfg.engine, cfg.label)
    with contextlib.ExitStack() as stack:
        limited = stack.enter_context(host_limited(host_limit)) if host_limit else None
        on_phase = stack.enter_context(phase_progress(label, cfg, show=show))
        row = measure(
            cfg,
            device=device,
            budgets=budgets,
            timeout_s=timeout,
            nproc_per_node=nproc,
            nnodes=nnodes,
            rdzv_endpoint=endpoint,
            on_phase=on_phase,
            timeline=timeline,
            **(limited.measure_options() if limited is not None else {}),
        )
        return row
