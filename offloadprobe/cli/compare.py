"""``offloadprobe compare``: strategies side by side, each in a fresh process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli import options as opt
from offloadprobe.cli.budget_report import enforce
from offloadprobe.core.budgets import budgets_from_flags
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
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
) -> None:
    """Run each strategy in a fresh process with the same model, seed and cycles."""
    from offloadprobe.compare.comparison import candidates, compare
    from offloadprobe.engine.optimizer.strategies import optimizer_strategy as optimizer_info
    from offloadprobe.engine.runtime.session import resolve_device
    from offloadprobe.engine.strategies import model_strategy

    check_writable(json_path, "--json")
    check_writable(markdown, "--markdown")
    model = opt.model_config(
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=vocab,
        seq_length=seq_length,
        micro_batch=micro_batch,
        payload=payload,
    )
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
    )
    resolve_device(device)
    for strategy in strategies:
        model_strategy(strategy)
    for spec in optimizer_strategy or []:
        optimizer_info(spec)
    budgets = budgets_from_flags(max_host_peak, max_gpu_residual, min_offload_bandwidth)
    items = candidates(strategies, optimizer_strategy or [], alloc_conf or [])
    labels = [c.label for c in items]
    base = baseline or labels[0]
    if base not in labels:
        raise UsageError(
            f"--baseline {base!r} is not one of the compared rows: {', '.join(labels)}"
        )
    err = Console(file=sys.stderr)

    def started(index: int, item: Any) -> None:
        err.print(
            f"({index + 1}/{len(items)}) {item.label}: running in a fresh process",
            markup=False,
            highlight=False,
        )

    comparison = compare(
        items, base_config, baseline=base, timeout_s=child_timeout, on_start=started
    )
    render_comparison(comparison, Console())
    environment = _environment(comparison.to_dict())
    if json_path is not None:
        write_json(comparison.to_dict(), json_path)
    if markdown is not None:
        write_text(comparison_markdown(comparison, environment=environment), markdown, "--markdown")
    enforce(budgets, [row.run for row in comparison.rows if row.run is not None])


def _environment(doc: dict) -> str:
    versions = doc.get("versions") or {}
    machine = doc.get("machine") or {}
    parts = [machine.get("gpu") or doc.get("device", "")]
    parts += [f"{k} {v}" for k, v in versions.items() if v and k != "python"]
    if doc.get("emulated"):
        parts.append("CPU emulation")
    return ", ".join(p for p in parts if p)
