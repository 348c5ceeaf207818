"""CPU emulation takes a DTensor's bytes as its local shard's (fake process group, no
ranks): it is on the emulated device when its shard is, a ``*_like`` of it allocates the
shard's bytes there, and ``.to("cpu")``/``.to("cuda")`` move the shard. The truth is
the emulated device's registry, against each local shard's own storage and the presets'
shard arithmetic."""

from __future__ import annotations

import gc

import torch

from offloadprobe.engine.runtime import emulation
from offloadprobe.engines.fsdp2.inventory import storage_bytes
from offloadprobe.engines.fsdp2.presets import ModelShape, shards_of
from offloadprobe.engines.fsdp2.ranks_cpu import emulated_fake_rank
from offloadprobe.engines.fsdp2.state import build_state


def settle(memory) -> None:
    gc.collect()
    memory.reconcile()
    memory.reclaim()


def test_a_dtensor_is_placed_sized_and_moved_by_its_local_shard():
    from torch.distributed.tensor import Shard, distribute_tensor

    with emulated_fake_rank(2, 3) as (world, memory):
        whole = torch.ones(10, 4, device="cuda")
        shard = distribute_tensor(whole, world.mesh, [Shard(0)])  # rows 8-9 of 10 here
        del whole
        settle(memory)
        local = shard._local_tensor
        assert local.shape == (2, 4)
        assert emulation.on_device(shard) and shard.device == torch.device("cuda", 0)
        assert memory.device_bytes() == local.untyped_storage().nbytes()
        base = memory.device_bytes()
        zeros = torch.zeros_like(shard)
        assert emulation.on_device(zeros)
        assert memory.device_bytes() == base + 2 * 4 * 4  # the shard's bytes, not the whole's
        host = shard.to("cpu")
        assert not emulation.on_device(host) and emulation.on_device(shard)
        assert torch.equal(host._local_tensor, local)
        assert memory.device_bytes() == base + 32
        back = host.to("cuda")
        assert emulation.on_device(back) and memory.device_bytes() == base + 64
        assert torch.equal(back._local_tensor, local)


def test_a_fake_rank_of_eight_on_the_emulated_device_holds_exactly_its_shards():
    shape = ModelShape.for_payload("plain", 1, vocab=1001)  # rank 7 holds 119 of 1001 rows
    with emulated_fake_rank(7, 8) as (world, memory):
        state = build_state(shape, world, batch=1, seq=8)
        state.train_step()
        settle(memory)
        shards = shards_of(shape, 8, 7)
        padded = sum(s.padded_numel for s in shards) * 4
        moments = 2 * sum(s.numel for s in shards) * 4
        assert memory.device_bytes() == 2 * padded + moments + 2 * 8 * 8
        assert storage_bytes(state.inventory(), emulation.on_device) == memory.device_bytes()
        assert "fake process group" in (state.note or "")
        state.module.to("cpu")
        settle(memory)
        left = {h.owner for h in state.inventory() if emulation.on_device(h.tensor)}
        assert left == {"exp_avg", "exp_avg_sq", "batch"}
        assert memory.device_bytes() == moments + 2 * 8 * 8
