"""An FSDP2 rank's built training state: the sharded model, AdamW, a batch, the world."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from offloadprobe.core.roles import Holding
from offloadprobe.engines.fsdp2 import inventory as _inventory
from offloadprobe.engines.fsdp2.model import build_model, make_batch, train_step
from offloadprobe.engines.fsdp2.presets import ModelShape
from offloadprobe.engines.fsdp2.world import Fsdp2World


@dataclass(slots=True)
class Fsdp2State:
    """What strategies act on: a model strategy gets ``module`` (the root, as verl's
    ``offload_fsdp_model_to_cpu(model)``), an optimizer strategy ``optimizer``."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    batch: tuple[torch.Tensor, torch.Tensor]
    world: Fsdp2World
    shape: ModelShape

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def shards(self) -> int:
        return self.world.shards

    @property
    def note(self) -> str | None:
        """What is not real on these ranks, in words (None where everything is)."""
        return self.world.note

    def train_step(self) -> float:
        return train_step(self.module, self.optimizer, self.batch)

    def inventory(self) -> list[Holding]:
        return _inventory.inventory(self.module, self.optimizer, self.batch)


def build_state(
    shape: ModelShape,
    world: Fsdp2World,
    *,
    seed: int = 1234,
    batch: int = 2,
    seq: int = 16,
    lr: float = 1e-3,
    reshard_after_forward: bool | None = None,
    offload_policy: object = None,
) -> Fsdp2State:
    """The sharded model (the same whole model on every rank, from ``seed``), AdamW over
    its fp32 shards, this rank's batch (``seed + rank``). AdamW's moments exist from the
    first step on. ``reshard_after_forward``, ``offload_policy``: :func:`.model.shard`'s."""
    module = build_model(
        shape, world.mesh, world.device, seed, reshard_after_forward, offload_policy
    )
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    data = make_batch(shape.vocab, batch, seq, seed + world.rank, world.device)
    return Fsdp2State(module=module, optimizer=optimizer, batch=data, world=world, shape=shape)
