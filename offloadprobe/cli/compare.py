"""``offloadprobe compare``: strategies side by side, each in a fresh process."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli import options as opt
from offloadprobe.cli.budget_report import enforce
from offloadprobe.cli.fit import check_fits
from offloadprobe.cli.timeline import (
    TIMELINE_ENV,
    PlotPath,
    TimelineOutputs,
    TracePath,
    compare_rows,
    side_file,
)
from offloadprobe.compare.comparison import Candidate
from offloadprobe.core.budgets import budgets_from_flags
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.world import check_trainable
from offloadprobe.report.comparison_table import render_comparison
from offloadprobe.report.markdown import comparison_markdown
from offloadprobe.report.output import check_writable, write_json, write_text


@app.command("compare")
def compare_command(
    strategies: Annotated[
        list[str], typer.Argument(help="Strategies to compare, e.g. naive lazy registered.")
    ],
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Row the ratios are taken against.")
    ] = None,
    alloc_conf: Annotated[
        list[str] | None,
        typer.Option(
            "--alloc-conf",
            help="PyTorch allocator settings for the children (PYTORCH_ALLOC_CONF), e.g. "
            "pinned_use_cuda_host_register:True. Repeat to compare settings.",
        ),
    ] = None,
    optimizer_strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--optimizer-strategy",
            help="Optimizer-state strategies; repeat to compare each with every strategy.",
        ),
    ] = None,
    precision_aware: opt.PrecisionAware = False,
    exp_avg_dtype: opt.ExpAvgDtype = "fp32",
    exp_avg_sq_dtype: opt.ExpAvgSqDtype = "fp32",
    store_param_remainders: opt.Remainders = False,
    reference_check: opt.ReferenceCheck = True,
    optimizer_first: opt.OptimizerFirst = False,
    force: opt.Force = False,
    child_timeout: Annotated[
        float | None, typer.Option("--child-timeout", help="Seconds each child may run.")
    ] = None,
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
    tp: opt.Tp = 1,
    pp: opt.Pp = 1,
    ep: opt.Ep = 1,
    cp: opt.Cp = 1,
    vpp: opt.Vpp = None,
    json_path: opt.JsonPath = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown table for a PR.")
    ] = None,
    max_host_peak: opt.MaxHostPeak = None,
    max_gpu_residual: opt.MaxGpuResidual = None,
    min_offload_bandwidth: opt.MinOffloadBandwidth = None,
    trace: TracePath = None,
    plot: PlotPath = None,
) -> None:
    """Run each strategy in a fresh process with the same model, seed and cycles."""
    from offloadprobe.compare.comparison import candidates, compare
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.optimizer.strategies import optimizer_strategy as optimizer_info
    from offloadprobe.engine.strategies import MODEL_STRATEGIES, model_strategy

    check_writable(json_path, "--json")
    check_writable(markdown, "--markdown")
    outputs = TimelineOutputs(trace=trace, plot=plot)
    outputs.check()
    model = opt.model_config(
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=vocab,
        seq_length=seq_length,
        micro_batch=micro_batch,
        payload=payload,
        num_experts=num_experts,
        moe_router_topk=moe_router_topk,
    )
    if int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
        raise UsageError(
            "compare starts its own children: run it outside torchrun, with --nproc-per-node "
            "for several ranks per row"
        )
    parallel = opt.parallel_config(tp=tp, pp=pp, ep=ep, cp=cp, vpp=vpp)
    if nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    parallel.dp(nproc_per_node)
    check_trainable(model, parallel)
    if nproc_per_node > 1 and outputs.wanted:
        raise UsageError("--trace/--plot record one process per row: drop them with ranks")
    choice = opt.optimizer_choice(
        precision_aware=precision_aware,
        exp_avg_dtype=exp_avg_dtype,
        exp_avg_sq_dtype=exp_avg_sq_dtype,
        remainders=store_param_remainders,
    )
    base_config = RunConfig(
        model=model,
        cycles=cycles,
        train_steps=train_steps,
        device=device,
        seed=seed,
        optimizer=choice,
        reference_check=reference_check,
        optimizer_first=optimizer_first,
        parallel=parallel,
    )
    for strategy in strategies:  # a misspelt name fails before torch is imported
        MODEL_STRATEGIES.check(strategy)
    for spec in optimizer_strategy or []:
        OPTIMIZER_STRATEGIES.check(spec)
    for strategy in strategies:
        model_strategy(strategy)
    for spec in optimizer_strategy or []:
        optimizer_info(spec)
    from offloadprobe.engine.alloc_conf import validate_alloc_conf
    from offloadprobe.engine.runtime.session import resolve_device

    resolve_device(device)
    for conf in alloc_conf or []:
        validate_alloc_conf(conf)
    budgets = budgets_from_flags(max_host_peak, max_gpu_residual, min_offload_bandwidth)
    items = candidates(strategies, optimizer_strategy or [], alloc_conf or [])
    pairs = [(c.strategy, c.optimizer_strategy or "none") for c in items]
    check_fits(model, strategies=pairs, optimizer=choice, device=resolve_device(device),
               force=force, ranks=nproc_per_node,
               model_parallel=parallel.model_parallel)  # fmt: skip
    base = _baseline(baseline, items)
    err = Console(file=sys.stderr)

    def started(index: int, item: Any) -> None:
        err.print(
            f"({index + 1}/{len(items)}) {item.label}: running in a fresh process",
            markup=False,
            highlight=False,
        )

    with tempfile.TemporaryDirectory(prefix="offloadprobe-timelines-") as tmp:
        folder = Path(tmp)
        comparison = compare(
            items,
            base_config,
            baseline=base,
            budgets=budgets,
            environment=_own_environment(model, device, cycles, train_steps, seed),
            timeout_s=child_timeout,
            on_start=started,
            extra_env=(lambda i: {TIMELINE_ENV: str(side_file(folder, i))})
            if outputs.wanted
            else None,
            nproc_per_node=nproc_per_node,
        )
        render_comparison(comparison, Console())
        doc = comparison.to_dict()
        if outputs.wanted:
            runs = [row.run for row in comparison.rows]
            labels = [c.label for c in items]
            outputs.write_rows(compare_rows(labels, runs, folder, doc), doc)
    if json_path is not None:
        write_json(doc, json_path)
    if markdown is not None:
        text = comparison_markdown(comparison, environment=_environment(doc))
        write_text(text, markdown, "--markdown")
    enforce([(r.candidate.label, r.verdict, r.breaches) for r in comparison.rows])


def _baseline(requested: str | None, items: list[Candidate]) -> str:
    """The row ratios are taken against: a full label, or a strategy naming one row."""
    labels = [c.label for c in items]
    if requested is None:
        return labels[0]
    if requested in labels:
        return requested
    named = [c.label for c in items if requested in (c.strategy, c.label.split(" [")[0])]
    if len(named) == 1:
        return named[0]
    raise UsageError(f"--baseline {requested!r} is not one of the compared rows: "
                     f"{', '.join(labels)}")  # fmt: skip


def _own_environment(model, device: str, cycles: int, train_steps: int, seed: int) -> dict:
    """The stable keys from this process, so the JSON has them even if every child died."""
    from dataclasses import asdict

    from offloadprobe.engine import environment
    from offloadprobe.engine.runtime.session import resolve_device
    from offloadprobe.plan.probe import probe_payload

    resolved = resolve_device(device)
    emulated = resolved == "cpu"
    return {
        "device": resolved,
        "emulated": emulated,
        "emulation_note": "CPU emulation" if emulated else None,
        "payload_bytes": probe_payload(model),
        "versions": environment.versions(),
        "machine": environment.machine(),
        "model": asdict(model),
        "settings": {"cycles": cycles, "train_steps": train_steps, "seed": seed},
    }


def _environment(doc: dict) -> str:
    versions = doc.get("versions") or {}
    machine = doc.get("machine") or {}
    parts = [machine.get("gpu") or doc.get("device", "")]
    parts += [f"{k} {v}" for k, v in versions.items() if v and k != "python"]
    if doc.get("emulated"):
        parts.append("CPU emulation")
    return ", ".join(p for p in parts if p)
