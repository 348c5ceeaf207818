"""What megatron-core's engine refuses before any worker starts (torch-free)."""

from __future__ import annotations

from typing import Any

from offloadprobe.core.errors import UsageError


def check_megatron(cfg: Any) -> None:
    """FSDP2's options mean nothing to megatron's DDP buffers: exit 2 naming the engine."""
    if cfg.model.preset is not None:
        raise UsageError(
            f"--preset {cfg.model.preset} shapes an FSDP2 model: add --engine fsdp2, or drop "
            "--preset (megatron's shape comes from --layers/--hidden/--payload)"
        )
    if cfg.parallel.shards is not None or cfg.parallel.shard_rank:
        raise UsageError(
            "--shards/--shard-rank reproduce FSDP2's sharding: add --engine fsdp2, or use "
            "--nproc-per-node with --tp/--pp for megatron"
        )
