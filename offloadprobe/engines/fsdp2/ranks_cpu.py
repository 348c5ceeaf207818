"""FSDP2's ranks on CPU: real gloo ranks, FSDP2's device the emulated one.

The mesh is a ``"cuda"`` mesh over the gloo group, so ``fully_shard`` puts every tensor it
makes (padded shards, all-gather outputs, reduce-scatter buffers, gradients) on
``cuda:0``, which CPU emulation (``engine.runtime.emulation``) keeps in host memory and
counts in its device registry. A DTensor's bytes are its local shard's: the emulation
registers, sizes and moves a DTensor by its ``_local_tensor``, so the registry's byte
total counts exactly the shards. The few ``torch.cuda`` calls FSDP2 makes are answered
as a GPU would: streams and events that are always done, device 0, a device already
set. Collectives are gloo's own, on host memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Iterator
from unittest import mock

import torch.distributed as dist

from offloadprobe.engine.runtime.cuda_shims import NullEvent, NullStream
from offloadprobe.engine.runtime.device_memory import DeviceMemory
from offloadprobe.engine.runtime.emulation import emulated_device
from offloadprobe.engines.fsdp2.world import Fsdp2World

NOTE = (
    "CPU: real gloo ranks; FSDP2's device tensors live in the emulated device (host "
    "memory, a DTensor counted by its local shard); streams and events are always done"
)


def cuda_calls() -> list[contextlib.AbstractContextManager[object]]:
    """The ``torch.cuda`` calls FSDP2 and ``DeviceMesh`` make, answered as a GPU would."""
    return [
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.is_initialized", lambda: True),  # DeviceMesh sets no device
        mock.patch("torch.cuda.set_device", lambda *a, **k: None),
        mock.patch("torch.cuda.synchronize", lambda *a, **k: None),
        mock.patch("torch.cuda.empty_cache", lambda: None),
        mock.patch("torch.cuda.Stream", NullStream),
        mock.patch("torch.cuda.Event", NullEvent),
        mock.patch("torch.cuda.stream", lambda *a, **k: contextlib.nullcontext()),
        mock.patch("torch.cuda.current_stream", lambda *a, **k: NullStream()),
        mock.patch("torch.cuda.default_stream", lambda *a, **k: NullStream()),
    ]


@contextlib.contextmanager
def emulated_gloo_ranks(malloc: str = "real") -> Iterator[tuple[Fsdp2World, DeviceMemory]]:
    """This process as one gloo rank, FSDP2's device emulated; the emulated device's
    memory with it. Joins the group torchrun's variables name (``env://``) unless the
    caller made one already (then it stays the caller's). ``malloc``: the emulation's."""
    from torch.distributed.device_mesh import init_device_mesh

    with contextlib.ExitStack() as stack:
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
            stack.callback(dist.destroy_process_group)
        if dist.get_backend() != "gloo":
            raise RuntimeError(f"CPU ranks need a gloo process group, not {dist.get_backend()}")
        for patch in cuda_calls():
            stack.enter_context(patch)
        memory = stack.enter_context(emulated_device(malloc))
        shards = dist.get_world_size()
        mesh = init_device_mesh("cuda", (shards,))
        world = Fsdp2World(
            rank=dist.get_rank(),
            shards=shards,
            mesh=mesh,
            device="cuda",
            kind="gloo-emulated",
            note=NOTE,
        )
        yield world, memory


FAKE_NOTE = (
    "CPU: rank {rank} of {shards} through PyTorch's fake process group, FSDP2's device "
    "emulated: sharding and padding are real, collectives are not"
)


@contextlib.contextmanager
def emulated_fake_rank(
    rank: int, shards: int, malloc: str = "real"
) -> Iterator[tuple[Fsdp2World, DeviceMemory]]:
    """Rank ``rank`` of any ``shards`` in this one CPU process: the fake process group
    (``ranks_fake``) on the emulated device, which counts each shard as on the GPU."""
    from offloadprobe.engines.fsdp2.ranks_fake import fake_rank

    with contextlib.ExitStack() as stack:
        for patch in cuda_calls():
            stack.enter_context(patch)
        memory = stack.enter_context(emulated_device(malloc))
        world = stack.enter_context(fake_rank(rank, shards, device="cuda"))
        yield dataclasses.replace(world, note=FAKE_NOTE.format(rank=rank, shards=shards)), memory
