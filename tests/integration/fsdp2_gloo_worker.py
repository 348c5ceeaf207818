"""One gloo rank of the FSDP2 engine under CPU emulation, for test_fsdp2_gloo_cpu.py.

``python -m tests.integration.fsdp2_gloo_worker RANK WORLD DIR``: joins the group through
a file store in DIR, builds the plain preset (vocabulary 1001: the embedding and the head
are uneven at 2 shards), trains, runs a trivial offload (every parameter and optimizer
storage through a host copy, gradients freed) twice, the second time with one host copy
corrupted, then verl's FSDP2 body (``model.to("cpu")``, ``model.to("cuda")``), and writes
what it saw to DIR/rank<RANK>.json. The truth it records beside the inventory's figures is
the emulated device's registry and the shard arithmetic of the presets.
"""

from __future__ import annotations

import gc
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from offloadprobe.core.roles import Holding, Role
from offloadprobe.engine.runtime import emulation
from offloadprobe.engines.fsdp2.inventory import storage_bytes
from offloadprobe.engines.fsdp2.presets import PRESETS, ModelShape, block_bytes, shards_of
from offloadprobe.engines.fsdp2.ranks_cpu import emulated_gloo_ranks
from offloadprobe.engines.fsdp2.state import build_state

BATCH, SEQ = 1, 8
CORRUPTED = "blocks.0.mlp.up.weight/exp_avg"
MOVED = (Role.PARAMETERS, Role.OPTIMIZER)


def settle(memory: Any) -> None:
    """As the harness's ``Runtime.settle``: unreferenced device storages are freed."""
    gc.collect()
    memory.reconcile()
    memory.reclaim()


def snapshot(holdings: list[Holding]) -> dict[str, torch.Tensor]:
    """Host copies of every parameter and optimizer tensor's bytes, by key."""
    out = {}
    for h in holdings:
        if h.role in MOVED:
            out[h.key] = h.tensor.detach().cpu().clone().reshape(-1).view(torch.uint8)
    return out


def differing(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [
        k for k in keys if k not in before or k not in after or not torch.equal(before[k], after[k])
    ]


def offload(holdings: list[Holding]) -> dict[int, tuple[Any, torch.Tensor, bool]]:
    """The trivial offload: each device storage a parameter or optimizer tensor lies in
    copied to the host and freed; gradient storages freed."""
    moved: dict[int, tuple[Any, torch.Tensor, bool]] = {}
    for h in holdings:
        storage = h.tensor.untyped_storage()
        if h.role not in (*MOVED, Role.GRADIENTS) or storage._cdata in moved:
            continue
        if not emulation.on_device(h.tensor):
            continue
        host = torch.empty(storage.nbytes(), dtype=torch.uint8)
        if h.role in MOVED:
            host.untyped_storage().copy_(storage)
        moved[storage._cdata] = (storage, host, h.role is Role.GRADIENTS)
    for storage, _, _ in moved.values():
        storage.resize_(0)
    return moved


def load(moved: dict[int, tuple[Any, torch.Tensor, bool]]) -> None:
    for storage, host, gradient in moved.values():
        storage.resize_(host.numel())
        if gradient:
            storage.fill_(0)
        else:
            storage.copy_(host.untyped_storage())


def by_owner(holdings: list[Holding]) -> dict[str, int]:
    """Device bytes by owner, each storage once."""
    owners = sorted({h.owner for h in holdings})
    return {
        o: n
        for o in owners
        if (n := storage_bytes([h for h in holdings if h.owner == o], emulation.on_device))
    }


def registry(memory: Any, holdings: list[Holding]) -> dict[str, Any]:
    """The registry's device bytes, the inventory's, and the device storages no holding names."""
    named = {h.tensor.untyped_storage()._cdata for h in holdings}
    unnamed = [s.nbytes() for s in memory.storages() if s._cdata not in named and s.nbytes()]
    return {
        "registry": memory.device_bytes(),
        "named": storage_bytes(holdings, emulation.on_device),
        "unnamed": unnamed,
        "owners": by_owner(holdings),
    }


def arithmetic(shape: ModelShape, rank: int, shards: int) -> int:
    """Device bytes after a train step, from the shard arithmetic alone: padded fp32
    shards and their packed padded gradients, unpadded AdamW moments, the batch."""
    shard = shards_of(shape, shards, rank)
    padded = sum(s.padded_numel for s in shard) * 4
    moments = 2 * sum(s.numel for s in shard) * 4
    return 2 * padded + moments + 2 * BATCH * SEQ * 8


def run(rank: int, world: int, facts: dict[str, Any]) -> None:
    """Each phase's facts into ``facts`` as it ends (what a failure left undone is absent)."""
    with emulated_gloo_ranks() as (w, memory):
        shape = ModelShape.for_payload("plain", 2 * block_bytes(PRESETS["plain"]), vocab=1001)
        state = build_state(shape, w, batch=BATCH, seq=SEQ)
        settle(memory)
        facts["note"] = state.note
        facts["built"] = registry(memory, state.inventory())
        facts["losses"] = [state.train_step()]
        settle(memory)
        facts["trained"] = registry(memory, state.inventory())
        facts["arithmetic"] = arithmetic(shape, rank, world)
        facts["uneven"] = [s.tensor.name for s in shards_of(shape, world, rank) if s.uneven]

        before = snapshot(state.inventory())
        moved = offload(state.inventory())
        settle(memory)
        facts["offloaded"] = registry(memory, state.inventory())
        load(moved)
        facts["round_trip"] = differing(before, snapshot(state.inventory()))

        key = next(h for h in state.inventory() if h.key == CORRUPTED)
        for phase in ("corrupted", "undone"):
            moved = offload(state.inventory())
            copy = moved.get(key.tensor.untyped_storage()._cdata)
            if copy is None:
                raise AssertionError(f"{CORRUPTED} is not on the device")
            copy[1][0] ^= 0xFF
            load(moved)
            facts[phase] = differing(before, snapshot(state.inventory()))
        del moved, key, copy  # the test's own references to device storages

        before = snapshot(state.inventory())
        state.module.to("cpu")  # verl's FSDP2 model offload body, blocking
        settle(memory)
        facts["to_cpu"] = registry(memory, state.inventory())
        state.module.to("cuda")
        settle(memory)
        facts["to_cuda"] = registry(memory, state.inventory())
        facts["to_round_trip"] = differing(before, snapshot(state.inventory()))
        facts["losses"].append(state.train_step())


def main() -> None:
    rank, world, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    dist.init_process_group(
        "gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world
    )
    facts: dict[str, Any] = {"rank": rank}
    try:
        run(rank, world, facts)
    except BaseException:
        facts["error"] = traceback.format_exc()
        raise
    finally:
        (out / f"rank{rank}.json").write_text(json.dumps(facts))
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
