"""``offloadprobe compare``: strategies side by side, each in a fresh process."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli import options as opt
from offloadprobe.cli.budget_report import enforce
from offloadprobe.cli.timeline import (
    TIMELINE_ENV,
    PlotPath,
    TimelineOutputs,
    TracePath,
    compare_rows,
    side_file,
)
from offloadprobe.compare.comparison import Candidate, candidates, compare, model_args
from offloadprobe.core.budgets import budgets_from_flags
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.engine.optimizer.strategies import validate_optimizer_strategy
from offloadprobe.engine.runtime.session import resolve_device
from offloadprobe.engine.strategies import validate_model_strategy
from offloadprobe.report.comparison_table import render_comparison
from offloadprobe.report.markdown import write_markdown


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
    model = opt.model_config(locals())
    RunConfig(model=model, cycles=cycles, train_steps=train_steps, device=device, seed=seed)
    resolve_device(device)
    for strategy in strategies:
        validate_model_strategy(strategy)
    for spec in optimizer_strategy or []:
        validate_optimizer_strategy(spec)
    choice = opt.optimizer_choice(
        precision_aware=precision_aware,
        exp_avg_dtype=exp_avg_dtype,
        exp_avg_sq_dtype=exp_avg_sq_dtype,
        remainders=store_param_remainders,
    )
    budgets = budgets_from_flags(max_host_peak, max_gpu_residual, min_offload_bandwidth)
    outputs = TimelineOutputs(trace=trace, plot=plot)
    outputs.check()
    items = candidates(strategies, optimizer_strategy or [], alloc_conf or [])
    labels = [c.label for c in items]
    base = baseline or labels[0]
    if base not in labels:
        raise UsageError(
            f"--baseline {base!r} is not one of the compared rows: {', '.join(labels)}"
        )
    common = [
        "--device", device, "--cycles", str(cycles), "--train-steps", str(train_steps),
        "--seed", str(seed), *model_args(model), *opt.optimizer_args(choice),
        "--reference-check" if reference_check else "--no-reference-check",
    ]  # fmt: skip
    err = Console(file=sys.stderr)

    def started(index: int, item: Candidate) -> None:
        err.print(
            f"({index + 1}/{len(items)}) {item.label}: running in a fresh process",
            markup=False,
            highlight=False,
        )

    with tempfile.TemporaryDirectory(prefix="offloadprobe-timelines-") as tmp:
        folder = Path(tmp)
        comparison = compare(
            items, common, baseline=base, timeout_s=child_timeout, on_start=started,
            extra_env=(lambda i: {TIMELINE_ENV: str(side_file(folder, i))})
            if outputs.wanted else None,
        )  # fmt: skip
        render_comparison(comparison, Console())
        if outputs.wanted:
            doc = comparison.to_dict()
            runs = [row.run for row in comparison.rows]
            outputs.write_rows(compare_rows(labels, runs, folder, doc), doc)
    environment = _environment(comparison.to_dict())
    if json_path is not None:
        from offloadprobe.report.json_report import write_document

        write_document(comparison.to_dict(), json_path)
    if markdown is not None:
        write_markdown(comparison, markdown, environment=environment)
    enforce(budgets, [row.run for row in comparison.rows if row.run is not None])


def _environment(doc: dict) -> str:
    versions = doc.get("versions") or {}
    machine = doc.get("machine") or {}
    parts = [machine.get("gpu") or doc.get("device", "")]
    parts += [f"{k} {v}" for k, v in versions.items() if v and k != "python"]
    if doc.get("emulated"):
        parts.append("CPU emulation")
    return ", ".join(p for p in parts if p)
