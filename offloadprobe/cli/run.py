"""``offloadprobe run``: one strategy's offload/load cycles in this process."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from offloadprobe.cli import app
from offloadprobe.cli import options as opt
from offloadprobe.cli.budget_report import enforce
from offloadprobe.cli.fit import check_fits
from offloadprobe.cli.timeline import PlotPath, TimelineOutputs, TimelinePath, TracePath
from offloadprobe.core.budgets import budgets_from_flags
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import parse_size
from offloadprobe.core.verdicts import judge
from offloadprobe.core.world import check_trainable, rank_file
from offloadprobe.isolation.launch import LAUNCHED_ENV, Launch, rendezvous_id, run_ranks
from offloadprobe.measure.phase_log import PhaseLog
from offloadprobe.measure.sampler import Sampler
from offloadprobe.report.output import check_writable, write_json
from offloadprobe.report.table import render_report

if TYPE_CHECKING:
    from offloadprobe.core.records import Report


@app.command("run")
def run_command(
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            "-s",
            help="naive, lazy, registered, pageable, none, or your own package.module:object.",
        ),
    ] = "lazy",
    optimizer_strategy_name: opt.OptimizerStrategy = "none",
    precision_aware: opt.PrecisionAware = False,
    exp_avg_dtype: opt.ExpAvgDtype = "fp32",
    exp_avg_sq_dtype: opt.ExpAvgSqDtype = "fp32",
    store_param_remainders: opt.Remainders = False,
    reference_check: opt.ReferenceCheck = True,
    optimizer_first: opt.OptimizerFirst = False,
    cycles: opt.Cycles = 3,
    train_steps: opt.TrainSteps = 1,
    device: opt.Device = "auto",
    payload: opt.Payload = None,
    layers: opt.Layers = opt.DEFAULT.num_layers,
    hidden: opt.Hidden = opt.DEFAULT.hidden_size,
    heads: opt.Heads = opt.DEFAULT.num_attention_heads,
    vocab: opt.Vocab = opt.DEFAULT.vocab_size,
    seq_length: opt.SeqLength = opt.DEFAULT.seq_length,
    micro_batch: opt.MicroBatch = opt.DEFAULT.micro_batch_size,
    seed: opt.Seed = 1234,
    num_experts: opt.NumExperts = 0,
    moe_router_topk: opt.MoeTopk = opt.DEFAULT.moe_router_topk,
    nproc_per_node: opt.NprocPerNode = 1,
    nnodes: opt.Nnodes = 1,
    rdzv_endpoint: opt.RdzvEndpoint = None,
    tp: opt.Tp = 1,
    pp: opt.Pp = 1,
    ep: opt.Ep = 1,
    cp: opt.Cp = 1,
    vpp: opt.Vpp = None,
    json_path: opt.JsonPath = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    max_host_peak: opt.MaxHostPeak = None,
    max_gpu_residual: opt.MaxGpuResidual = None,
    min_offload_bandwidth: opt.MinOffloadBandwidth = None,
    rollout_claim: Annotated[
        str | None,
        typer.Option(
            "--rollout-claim",
            help="Between offload and load, claim this much device memory, as a rollout "
            "engine would (e.g. 60GiB).",
        ),
    ] = None,
    gpu_limit: Annotated[
        str | None,
        typer.Option("--gpu-limit", help="Cap the device memory this run may allocate."),
    ] = None,
    force: opt.Force = False,
    phase_log: Annotated[
        Path | None,
        typer.Option("--phase-log", hidden=True, help="Append phase start/end lines here."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            hidden=True,
            help="Read the whole run configuration from this JSON file (child processes).",
        ),
    ] = None,
    trace: TracePath = None,
    plot: PlotPath = None,
    timeline: TimelinePath = None,
) -> None:
    """Run offload/load cycles of one strategy and print what each phase cost."""
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES, optimizer_strategy
    from offloadprobe.engine.strategies import MODEL_STRATEGIES, model_strategy

    check_writable(json_path, "--json")
    outputs = TimelineOutputs(trace=trace, plot=plot, side=timeline)
    outputs.check()
    if config is not None:
        cfg = _read_config(config)
    else:
        cfg = _config_from_flags(
            model=opt.model_config(
                layers=layers,
                hidden=hidden,
                heads=heads,
                vocab=vocab,
                seq_length=seq_length,
                micro_batch=micro_batch,
                payload=payload,
                num_experts=num_experts,
                moe_router_topk=moe_router_topk,
            ),
            parallel=opt.parallel_config(tp=tp, pp=pp, ep=ep, cp=cp, vpp=vpp),
            strategy=strategy,
            cycles=cycles,
            train_steps=train_steps,
            device=device,
            seed=seed,
            rollout_claim=rollout_claim,
            gpu_limit=gpu_limit,
            optimizer_strategy=optimizer_strategy_name,
            optimizer=opt.optimizer_choice(
                precision_aware=precision_aware,
                exp_avg_dtype=exp_avg_dtype,
                exp_avg_sq_dtype=exp_avg_sq_dtype,
                remainders=store_param_remainders,
            ),
            reference_check=reference_check,
            optimizer_first=optimizer_first,
        )
    MODEL_STRATEGIES.check(cfg.strategy)  # a misspelt name fails before torch is imported
    OPTIMIZER_STRATEGIES.check(cfg.optimizer_strategy)
    model_strategy(cfg.strategy)
    optimizer_strategy(cfg.optimizer_strategy)
    from offloadprobe.engine.runtime.session import resolve_device

    resolved = resolve_device(cfg.device)
    check_trainable(cfg.model, cfg.parallel)
    budgets = budgets_from_flags(max_host_peak, max_gpu_residual, min_offload_bandwidth)
    if nproc_per_node < 1 or nnodes < 1:
        raise UsageError("--nproc-per-node and --nnodes must be at least 1")
    if under_torchrun() and (outputs.wanted or nproc_per_node > 1 or nnodes > 1):
        raise UsageError(
            "under torchrun, offloadprobe is one rank: drop --nproc-per-node/--nnodes (torchrun "
            "starts the ranks) and --trace/--plot/--timeline (they record one process)"
        )
    if nnodes > 1 and not rdzv_endpoint:
        raise UsageError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node")
    if (nproc_per_node > 1 or nnodes > 1) and not under_torchrun():
        cfg.parallel.dp(nproc_per_node * nnodes)  # exit 2 before any rank starts
        if config is None:
            check_fits(cfg.model, strategies=[(cfg.strategy, cfg.optimizer_strategy)],
                       optimizer=cfg.optimizer, device=resolved, force=force,
                       ranks=nproc_per_node,
                       model_parallel=cfg.parallel.model_parallel)  # fmt: skip
        if outputs.wanted:
            raise UsageError("--trace/--plot/--timeline record one process: drop them for now")
        launch = Launch(
            nproc_per_node=nproc_per_node, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
            run_id=rendezvous_id(rdzv_endpoint) if nnodes > 1 else None,
        )  # fmt: skip
        report = run_ranks(cfg, launch, show=progress)
        if report is None:  # rank 0 ran on another node: its run prints the report
            return
        enforce_report(_finish(report, budgets, json_path), budgets)
        return
    if under_torchrun():
        cfg.parallel.dp(int(os.environ["WORLD_SIZE"]))
    elif not cfg.parallel.is_single:
        raise UsageError(
            "--tp/--pp/--ep/--cp/--vpp need several ranks: add --nproc-per-node N "
            "(or start offloadprobe under torchrun)"
        )
    if config is None and not under_torchrun():  # a child's parent checked the fit already
        pairs = [(cfg.strategy, cfg.optimizer_strategy)]
        check_fits(cfg.model, strategies=pairs, optimizer=cfg.optimizer, device=resolved,
                   force=force)  # fmt: skip
    sampler = outputs.sampler(resolved) if not under_torchrun() else None
    try:
        report = _run_with_progress(cfg, show=progress, phase_log=phase_log, sampler=sampler)
    finally:
        drawn = sampler.stop() if sampler is not None else None
    if report is None:  # a rank other than 0: rank 0 reports for every rank
        return
    if os.environ.get(LAUNCHED_ENV):  # rank 0 under our launcher: it renders and judges
        if json_path is not None:
            write_json(report.to_dict(), json_path)
        return
    report = _finish(report, budgets, json_path)
    outputs.write_run(report, drawn)
    enforce_report(report, budgets)


def under_torchrun() -> bool:
    """Whether this process is one of several ranks torchrun started."""
    return int(os.environ.get("WORLD_SIZE", "1") or "1") > 1


def _finish(report: Report, budgets: list, json_path: Path | None) -> Report:
    """Judge every row, print the report, write the JSON (``enforce_report`` then exits 1
    when a row is not ok)."""
    judged = [(run.label, *judge(run, budgets)) for run in report.runs]
    report = dataclasses.replace(report, verdicts=[verdict for _, verdict, _ in judged])
    render_report(report, Console())
    if json_path is not None:
        write_json(report.to_dict(), json_path)
    return report


def enforce_report(report: Report, budgets: list) -> None:
    enforce([(run.label, *judge(run, budgets)) for run in report.runs])


def _read_config(path: Path) -> RunConfig:
    try:
        return RunConfig.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"--config {path}: not a run configuration ({exc})") from None


def _config_from_flags(
    *, rollout_claim: str | None, gpu_limit: str | None, **fields: Any
) -> RunConfig:
    return RunConfig(
        rollout_claim_bytes=parse_size(rollout_claim, what="--rollout-claim")
        if rollout_claim
        else 0,
        gpu_limit_bytes=parse_size(gpu_limit, what="--gpu-limit") if gpu_limit else None,
        **fields,
    )


def _run_with_progress(
    cfg: RunConfig, *, show: bool, phase_log: Path | None, sampler: Sampler | None = None
) -> Report | None:
    from offloadprobe.engine.runner import Hooks, phases_per_run, run

    console = Console(file=sys.stderr)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not show,
    ) as bar:
        name = f"{cfg.strategy} + {cfg.optimizer_strategy}"
        task = bar.add_task(f"{name}: building model", total=phases_per_run(cfg))

        def advance(rec) -> None:
            label = f"{name}: cycle {rec.cycle} {rec.phase}"
            bar.update(task, advance=1, description=label)

        log = PhaseLog(rank_file(phase_log)) if phase_log else None
        return run(
            cfg,
            Hooks(
                on_phase=lambda rec: (advance(rec), log and log.end(rec.cycle, rec.phase)),
                on_start=log.start if log else None,
                sampler=sampler,
            ),
        )
