"""The FSDP2 engine's session: its ranks and device mesh, for one runtime.

- Under torchrun (several ranks): the harness's join (gloo in CPU emulation, NCCL on GPUs),
  one shard per rank over a 1-D mesh of every rank.
- One process, ``--shards N`` above 1: rank ``--shard-rank`` of N through PyTorch's fake
  process group (``ranks_fake``): every shard's size and padding are real, collectives
  are not, and the run says so (no reference trajectory: its trained values are not a
  real run's).
- One process, one shard: a one-rank group.

In CPU emulation the mesh is a ``"cuda"`` mesh over the emulated device (``ranks_cpu``):
FSDP2's tensors live in host memory, counted as on the device, a DTensor by its shard.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from offloadprobe.core.errors import UsageError
from offloadprobe.engine.runtime.engine_session import EngineSession, SessionContext
from offloadprobe.engines.fsdp2 import ranks_cpu, ranks_fake
from offloadprobe.engines.fsdp2.world import Fsdp2World


def _mesh(shards: int) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cuda", (shards,))


@contextlib.contextmanager
def fsdp2_session(context: SessionContext) -> Iterator[EngineSession]:
    """This process as one FSDP2 rank (see the module's docstring)."""
    stack, world, parallel = context.stack, context.world, context.parallel
    if context.emulated:  # the torch.cuda calls DeviceMesh and FSDP2 make, as a GPU answers
        for patch in ranks_cpu.cuda_calls():
            stack.enter_context(patch)
    shards = parallel.shards
    if world.distributed:
        if shards not in (None, world.world_size):
            raise UsageError(
                f"--shards {shards} with {world.world_size} ranks: FSDP2 shards over every "
                "rank; drop --shards, or run one process with it"
            )
        control = context.join()
        kind = "gloo-emulated" if context.emulated else "nccl"
        note = ranks_cpu.NOTE if context.emulated else None
        handle = Fsdp2World(
            rank=world.rank,
            shards=world.world_size,
            mesh=_mesh(world.world_size),
            device="cuda",
            kind=kind,
            note=note,
        )
        yield EngineSession(control=control, notes=[note] if note else [], handle=handle)
        return
    if (shards or 1) == 1:
        control = context.join()
        handle = Fsdp2World(rank=0, shards=1, mesh=_mesh(1), device="cuda", kind="one rank")
        yield EngineSession(control=control, handle=handle)
        return
    made = stack.enter_context(ranks_fake.fake_rank(parallel.shard_rank, shards, device="cuda"))
    yield EngineSession(
        notes=[
            made.note or "",
            "no reference run: the fake process group's trained values "
            "are not a real run's (each round trip is still checked byte for byte)",
        ],
        collectives_real=False,
        handle=made,
    )
