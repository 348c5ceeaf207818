"""Where an FSDP2 rank runs: its place among the shards, its mesh, and what is real."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Fsdp2World:
    """One rank of ``shards``, as a ranks module (``ranks_cpu``, ``ranks_fake``,
    ``ranks_nccl``) made it."""

    rank: int
    shards: int
    mesh: Any
    """The 1-D ``DeviceMesh`` every ``fully_shard`` call shards over."""
    device: str
    """Where FSDP2 puts its tensors: ``"cuda"`` (emulated in host memory on CPU ranks)
    or ``"cpu"`` (fake process group on a host without a GPU)."""
    kind: str
    """``"gloo-emulated"``, ``"fake"`` or ``"nccl"``."""
    note: str | None = None
    """What is not real here, in words, for every result to print."""
