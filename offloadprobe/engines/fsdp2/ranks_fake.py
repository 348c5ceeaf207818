"""FSDP2 as rank ``rank`` of ``shards`` on one device, through PyTorch's fake process
group: every shard's size and padding are real, collectives are not (they return at once
and leave their outputs as they were, so trained values are not a real run's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.distributed as dist

from offloadprobe.engines.fsdp2.world import Fsdp2World


def note(rank: int, shards: int) -> str:
    return (
        f"rank {rank} of {shards} through PyTorch's fake process group: sharding and "
        "padding are real, collectives are not (trained values are not a real run's)"
    )


@contextlib.contextmanager
def fake_rank(rank: int, shards: int, device: str = "cuda") -> Iterator[Fsdp2World]:
    """This process as rank ``rank`` of ``shards`` (``device``: ``"cuda"``, or ``"cpu"``
    where there is no GPU; sharding works on either)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group exists already: fake ranks need a fresh process")
    if not 0 <= rank < shards:
        raise ValueError(f"rank {rank} of {shards} shards")
    if device == "cuda":
        import torch

        torch.cuda.set_device(0)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=shards)
    try:
        mesh = init_device_mesh(device, (shards,))
        yield Fsdp2World(
            rank=rank,
            shards=shards,
            mesh=mesh,
            device=device,
            kind="fake",
            note=note(rank, shards),
        )
    finally:
        dist.destroy_process_group()
