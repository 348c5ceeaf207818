"""Where one rank stands: its place among the ranks torchrun started and the parallel layout."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from offloadprobe.core.config import ModelConfig, ParallelConfig
from offloadprobe.core.errors import UsageError

LAUNCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What torchrun sets for every rank; ``GROUP_RANK`` (the node) groups ranks into nodes, so
a launcher that does not set it (srun, mpirun) is refused rather than guessed at."""


@dataclass(frozen=True, kw_only=True, slots=True)
class World:
    """One rank's position (from torchrun's environment) and megatron's parallel sizes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    """Rank among the ranks of this node."""
    local_world_size: int = 1
    """Ranks on this node."""
    node_rank: int = 0
    """torchrun's ``GROUP_RANK``: which node (agent) started this rank."""
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    etp: int = 1
    """Expert tensor-parallel size: always 1 here (experts whole on their ep rank, as
    megatron-core requires for MoE layers with linear biases)."""
    vpp: int | None = None
    """Virtual pipeline stages per pipeline rank (model chunks per rank), or None."""
    dp: int = 1
    """Data-parallel size: ``world_size / (tp * pp * cp)``."""

    @property
    def megatron_sizes(self) -> dict[str, int | None]:
        """The parallel sizes as megatron-core's keywords (``initialize_model_parallel`` and
        ``TransformerConfig`` take the same names)."""
        return {
            "tensor_model_parallel_size": self.tp,
            "pipeline_model_parallel_size": self.pp,
            "virtual_pipeline_model_parallel_size": self.vpp,
            "context_parallel_size": self.cp,
            "expert_model_parallel_size": self.ep,
            "expert_tensor_parallel_size": self.etp,
        }

    @property
    def distributed(self) -> bool:
        """Whether this process is one of several ranks."""
        return self.world_size > 1

    @property
    def chunks(self) -> int:
        """Model chunks this rank holds (``vpp``, or 1)."""
        return self.vpp or 1

    @property
    def layout(self) -> str:
        """The layout in words, e.g. ``tp 2 pp 1 ep 1 cp 1 dp 1``."""
        sizes = f"tp {self.tp} pp {self.pp} ep {self.ep} cp {self.cp} dp {self.dp}"
        return sizes + (f" vpp {self.vpp}" if self.vpp else "")

    @classmethod
    def from_env(cls, env: Mapping[str, str], parallel: ParallelConfig) -> World:
        """This rank's world from torchrun's variables (one rank when ``WORLD_SIZE`` is unset
        or 1); exit 2 when the layout does not fit the world size."""
        world_size = int(env.get("WORLD_SIZE", "1") or "1")
        if world_size > 1:
            missing = [name for name in LAUNCH_VARIABLES if not env.get(name)]
            if missing:
                raise UsageError(
                    f"WORLD_SIZE is {world_size} but {', '.join(missing)} is unset: "
                    "start the ranks with torchrun (or --nproc-per-node)"
                )
        local_world = int(env.get("LOCAL_WORLD_SIZE", "0") or "0") or world_size
        return cls(
            rank=int(env.get("RANK", "0") or "0") if world_size > 1 else 0,
            world_size=world_size,
            local_rank=int(env.get("LOCAL_RANK", "0") or "0") if world_size > 1 else 0,
            local_world_size=local_world if world_size > 1 else 1,
            node_rank=int(env.get("GROUP_RANK", "0") or "0") if world_size > 1 else 0,
            tp=parallel.tp,
            pp=parallel.pp,
            ep=parallel.ep,
            cp=parallel.cp,
            vpp=parallel.vpp,
            dp=parallel.dp(world_size),
        )


def check_layout(cfg: ModelConfig, world: World | ParallelConfig) -> None:
    """Raise ``UsageError`` for a layout megatron-core cannot build on this host (what it
    lacks: TransformerEngine for cp, Apex for MoE under tp). Torch-free: a launcher can
    call it with the ``ParallelConfig`` before starting any rank."""
    if world.cp > 1 and importlib.util.find_spec("transformer_engine") is None:
        raise UsageError(
            "--cp needs TransformerEngine (megatron-core's context-parallel attention), "
            "which this host lacks: use --cp 1 or install transformer_engine"
        )
    if world.tp > 1 and cfg.num_experts:
        # megatron trains MoE layers under tp only with sequence parallelism, and the local
        # spec's LayerNorm supports that only as Apex's FusedLayerNorm
        if importlib.util.find_spec("apex") is None:
            raise UsageError(
                "--tp above 1 with --num-experts needs sequence parallelism, which "
                "megatron-core's local layers support only with Apex, which this host lacks: "
                "use --tp 1 with experts (--ep spreads them)"
            )
        if cfg.seq_length % world.tp:
            raise UsageError(
                f"--tp {world.tp} with experts needs sequence parallelism: make --seq-length "
                f"a multiple of {world.tp}"
            )


def check_trainable(cfg: ModelConfig, world: World | ParallelConfig) -> None:
    """Raise ``UsageError`` for a layout megatron-core builds but cannot train here (checked
    before a run starts; building alone, as a parameter count does, stays allowed)."""
    check_layout(cfg, world)
    if cfg.num_experts and world.ep == 1 and _megatron_version() < (0, 19):
        # measured on megatron-core 0.16.1: its expert MLP adds the bias in place to a view
        # a custom autograd function returned, which autograd refuses in the train step
        raise UsageError(
            "--num-experts with --ep 1 fails in megatron-core "
            f"{'.'.join(map(str, _megatron_version()))}'s expert MLP (an in-place bias add "
            "on a view autograd refuses): use --ep 2 or more, or megatron-core 0.19"
        )


def _megatron_version() -> tuple[int, ...]:
    """megatron-core's installed version as numbers (torch-free: package metadata only)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("megatron-core")
    except PackageNotFoundError:
        return (0,)
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def rank_file(path: Path, rank: int | None = None) -> Path:
    """One file per rank of a run over several ranks (``error.json.rank1``): this process's
    rank from torchrun's ``RANK`` when not given; ``path`` itself for one process."""
    if rank is None:
        if int(os.environ.get("WORLD_SIZE", "1") or "1") <= 1:
            return path
        rank = int(os.environ.get("RANK", "0") or "0")
    return path.with_name(f"{path.name}.rank{rank}")


def under_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of several ranks torchrun started."""
    env = os.environ if env is None else env
    return int(env.get("WORLD_SIZE", "1") or "1") > 1
