"""FSDP2's ranks on GPUs: real NCCL ranks, one GPU each, as torchrun starts them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from offloadprobe.engines.fsdp2.world import Fsdp2World


@contextlib.contextmanager
def nccl_ranks() -> Iterator[Fsdp2World]:
    """This process as the rank torchrun's variables name (``LOCAL_RANK`` its GPU); joins
    the NCCL group unless the caller made one already (then it stays the caller's)."""
    from torch.distributed.device_mesh import init_device_mesh

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    with contextlib.ExitStack() as stack:
        if not dist.is_initialized():
            dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
            stack.callback(dist.destroy_process_group)
        shards = dist.get_world_size()
        mesh = init_device_mesh("cuda", (shards,))
        yield Fsdp2World(rank=dist.get_rank(), shards=shards, mesh=mesh, device="cuda", kind="nccl")
