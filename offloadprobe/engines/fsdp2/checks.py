"""What the FSDP2 engine refuses before any worker starts, and ``--payload`` in its terms
(torch-free: the parent reads both)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.engines.fsdp2.presets import PRESETS, blocks_for, preset

DEFAULT_PRESET = "plain"

_MEGATRON_ONLY = (
    ("tp", "--tp"),
    ("pp", "--pp"),
    ("ep", "--ep"),
    ("cp", "--cp"),
)


def preset_of(model: Any) -> str:
    """The run's shape preset (``plain`` where none was given)."""
    return model.preset or DEFAULT_PRESET


def check_fsdp2(cfg: Any) -> None:
    """Options of megatron's model and optimizer mean nothing to a ``fully_shard``'ed model
    with ``torch.optim.AdamW``: each exits 2 in one line, as does an unknown preset."""
    name = preset_of(cfg.model)
    if name not in PRESETS:
        raise UsageError(
            f"--preset {name!r} is not an FSDP2 shape preset: choose one of {', '.join(PRESETS)}"
        )
    for field, flag in _MEGATRON_ONLY:
        if getattr(cfg.parallel, field) != 1:
            raise UsageError(
                f"{flag} is megatron's parallelism: FSDP2 shards over every rank "
                "(--nproc-per-node, or --shards in one process); drop it or use --engine megatron"
            )
    if cfg.parallel.vpp is not None:
        raise UsageError("--vpp is megatron's: drop it with --engine fsdp2")
    model = cfg.model
    for flag, value in (
        ("--num-experts", model.num_experts),
        ("--ref-model", model.ref_model),
        ("--frozen-fraction", model.frozen_fraction),
        ("--workspace-cache", model.workspace_cache_bytes),
    ):
        if value:
            raise UsageError(
                f"{flag} is a part of megatron's probe model: the FSDP2 engine builds none; "
                "drop it or use --engine megatron"
            )
    opt = cfg.optimizer
    if (
        opt.precision_aware
        or opt.store_param_remainders
        or (
            opt.exp_avg_dtype,
            opt.exp_avg_sq_dtype,
        )
        != ("fp32", "fp32")
    ):
        raise UsageError(
            "--precision-aware and the state dtypes are megatron's DistributedOptimizer: "
            "FSDP2 runs torch.optim.AdamW with fp32 state; drop them or use --engine megatron"
        )


def size_model(model: Any, payload: int) -> Any:
    """``--payload`` for FSDP2: the number of blocks of the preset whose fp32 parameters,
    whole (before sharding), come nearest ``payload`` bytes (``presets.blocks_for``)."""
    name = preset_of(model)
    if name not in PRESETS:
        raise UsageError(
            f"--preset {name!r} is not an FSDP2 shape preset: choose one of {', '.join(PRESETS)}"
        )
    return replace(model, num_layers=blocks_for(preset(name), payload))
