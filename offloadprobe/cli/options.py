"""Options shared by several verbs, and their conversion to config records."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from offloadprobe.core.config import ModelConfig, OptimizerChoice, ParallelConfig, size_for_payload
from offloadprobe.core.units import parse_size

Layers = Annotated[int, typer.Option("--layers", help="Transformer layers.")]
Hidden = Annotated[int, typer.Option("--hidden", help="Hidden size.")]
Heads = Annotated[int, typer.Option("--heads", help="Attention heads (must divide --hidden).")]
Vocab = Annotated[int, typer.Option("--vocab", help="Vocabulary size.")]
SeqLength = Annotated[int, typer.Option("--seq-length", help="Tokens per sample.")]
MicroBatch = Annotated[int, typer.Option("--micro-batch", help="Samples per train step.")]
Payload = Annotated[
    str | None,
    typer.Option(
        "--payload",
        help="Size the model to about this many bytes of bf16 parameters, e.g. 512MiB or "
        "5GiB (overrides --hidden and --vocab).",
    ),
]
Cycles = Annotated[int, typer.Option("--cycles", help="Offload/load cycles.")]
TrainSteps = Annotated[
    int, typer.Option("--train-steps", help="Train steps before the first offload and between.")
]
Device = Annotated[str, typer.Option("--device", help="cuda, cpu or auto.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for weights and data.")]

NumExperts = Annotated[
    int, typer.Option("--num-experts", help="Routed experts per layer (MoE); 0 for dense.")
]
MoeTopk = Annotated[int, typer.Option("--moe-router-topk", help="Experts per token (MoE).")]
NprocPerNode = Annotated[
    int,
    typer.Option(
        "--nproc-per-node",
        help="Ranks on this node, started through torchrun's launcher inside one node "
        "memory cgroup (NCCL on CUDA, gloo on CPU).",
    ),
]
Nnodes = Annotated[
    int, typer.Option("--nnodes", help="Nodes (torchrun agents); start one run per node.")
]
RdzvEndpoint = Annotated[
    str | None,
    typer.Option("--rdzv-endpoint", help="host:port of the c10d rendezvous (with --nnodes)."),
]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")]
Pp = Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.")]
Ep = Annotated[int, typer.Option("--ep", help="Expert-parallel size (MoE).")]
Cp = Annotated[int, typer.Option("--cp", help="Context-parallel size.")]
Vpp = Annotated[
    int | None, typer.Option("--vpp", help="Virtual pipeline stages per pipeline rank.")
]

DEFAULT = ModelConfig()


def parallel_config(*, tp: int, pp: int, ep: int, cp: int, vpp: int | None) -> ParallelConfig:
    """Validate the parallel-size flags into a ``ParallelConfig``."""
    return ParallelConfig(tp=tp, pp=pp, ep=ep, cp=cp, vpp=vpp)


def model_config(
    *,
    layers: int,
    hidden: int,
    heads: int,
    vocab: int,
    seq_length: int,
    micro_batch: int = DEFAULT.micro_batch_size,
    payload: str | None = None,
    num_experts: int = 0,
    moe_router_topk: int = DEFAULT.moe_router_topk,
) -> ModelConfig:
    """Validate a command's model flags into a ``ModelConfig``, sized to ``--payload``
    when given. Every flag is a named argument: a renamed option fails loudly."""
    cfg = ModelConfig(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=vocab,
        seq_length=seq_length,
        micro_batch_size=micro_batch,
        num_experts=num_experts,
        moe_router_topk=moe_router_topk,
    )
    if payload is not None:
        cfg = size_for_payload(cfg, parse_size(payload, what="--payload"))
    return cfg


MaxHostPeak = Annotated[
    str | None,
    typer.Option(
        "--max-host-peak",
        help="Budget: worst host peak over the pre-offload baseline, as a multiple of the "
        "payload (1.1x) or a size (6GiB).",
    ),
]
MaxGpuResidual = Annotated[
    str | None,
    typer.Option("--max-gpu-residual", help="Budget: device bytes left after offload (a size)."),
]
MinOffloadBandwidth = Annotated[
    str | None,
    typer.Option("--min-offload-bandwidth", help="Budget: steady offload rate in GB/s."),
]
JsonPath = Annotated[
    Path | None, typer.Option("--json", help="Write every reading to this JSON file.")
]

OptimizerStrategy = Annotated[
    str,
    typer.Option(
        "--optimizer-strategy",
        help="Optimizer-state offload: legacy, fixed, complete, none, or package.module:object.",
    ),
]
PrecisionAware = Annotated[
    bool,
    typer.Option(
        "--precision-aware/--classic",
        help="megatron's precision-aware optimizer (master weights in the optimizer state).",
    ),
]
ExpAvgDtype = Annotated[str, typer.Option("--exp-avg-dtype", help="fp32, bf16, fp16 or uint8.")]
ExpAvgSqDtype = Annotated[
    str, typer.Option("--exp-avg-sq-dtype", help="fp32, bf16, fp16 or uint8.")
]
Remainders = Annotated[
    bool,
    typer.Option(
        "--store-param-remainders",
        help="Precision-aware: keep int16 remainders of the fp32 master weights.",
    ),
]
Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Run even when the estimated host memory exceeds what this process may use.",
    ),
]
OptimizerFirst = Annotated[
    bool,
    typer.Option(
        "--optimizer-first/--params-first",
        help="Order of the moves within a cycle: optimizer state before parameters in both "
        "offload and load (megatron-core's own optimizer offload needs it under "
        "--precision-aware), or parameters first (verl's order, the default).",
    ),
]
ReferenceCheck = Annotated[
    bool,
    typer.Option(
        "--reference-check/--no-reference-check",
        help="Compare each train step after a load bit for bit with a run that never offloaded.",
    ),
]


def optimizer_choice(
    *, precision_aware: bool, exp_avg_dtype: str, exp_avg_sq_dtype: str, remainders: bool
) -> OptimizerChoice:
    """Validate the optimizer flags into an ``OptimizerChoice``."""
    return OptimizerChoice(
        precision_aware=precision_aware,
        exp_avg_dtype=exp_avg_dtype,
        exp_avg_sq_dtype=exp_avg_sq_dtype,
        store_param_remainders=remainders,
    )
