"""FSDP2 engine ranks on CUDA, for test_fsdp2_cuda.py.

``python -m tests.gpu.fsdp2_cuda_worker fake RANK SHARDS BLOCKS OUT``: rank RANK of SHARDS on
one GPU through the fake process group; ``torchrun --nproc-per-node N -m
tests.gpu.fsdp2_cuda_worker nccl - - BLOCKS OUT``: real NCCL ranks. Qwen2.5-7B's shapes
(its real vocabulary), BLOCKS blocks. Two cycles of: a train step, verl's blocking FSDP2
offload body (``model.to("cpu")``, then ``empty_cache``), its load (``model.to("cuda")``).
What each rank wrote, to OUT/rank<r>.json: after each phase, the bytes the caching
allocator says are requested now (``requested_bytes.all.current``, cuBLAS's workspaces
cleared first: the truth, read beside the inventory) and the inventory's device bytes by
owner; each shard's storage against the presets' arithmetic; the round trip by key.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from offloadprobe.core.roles import Holding
from offloadprobe.engines.fsdp2.inventory import storage_bytes
from offloadprobe.engines.fsdp2.presets import PRESETS, ModelShape, block_bytes, shards_of
from offloadprobe.engines.fsdp2.state import build_state
from tests.integration.fsdp2_gloo_worker import differing, snapshot


def on_gpu(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda and tensor.untyped_storage().nbytes() > 0


def settle() -> None:
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()  # cuBLAS's per-handle workspaces come from the caching allocator too
    torch.cuda.empty_cache()


def device(holdings: list[Holding]) -> dict[str, Any]:
    settle()
    owners = sorted({h.owner for h in holdings})
    by_owner = {
        o: n for o in owners if (n := storage_bytes([h for h in holdings if h.owner == o], on_gpu))
    }
    return {
        "requested": torch.cuda.memory_stats()["requested_bytes.all.current"],
        "named": storage_bytes(holdings, on_gpu),
        "owners": by_owner,
    }


def shards_checked(state: Any) -> list[str]:
    """Parameters whose local shard or storage differs from the presets' arithmetic."""
    expected = {s.tensor.name: s for s in shards_of(state.shape, state.shards, state.rank)}
    wrong = []
    for h in state.inventory():
        if h.owner != "sharded_param":
            continue
        s = expected[h.key.removesuffix("/sharded_param")]
        if h.tensor.numel() != s.numel or h.tensor.untyped_storage().nbytes() != s.padded_numel * 4:
            wrong.append(h.key)
    return wrong


def run(world: Any, blocks: int, facts: dict[str, Any]) -> None:
    qwen = PRESETS["qwen2.5-7b"]
    shape = ModelShape.for_payload(qwen.name, blocks * block_bytes(qwen))
    state = build_state(shape, world, batch=1, seq=64)
    facts.update(rank=world.rank, shards=world.shards, kind=world.kind, note=world.note)
    facts["uneven"] = sum(s.uneven for s in shards_of(shape, world.shards, world.rank))
    facts["built"] = device(state.inventory())
    facts["shards_wrong"] = shards_checked(state)
    facts["cycles"] = []
    for _ in range(2):
        cycle: dict[str, Any] = {"loss": state.train_step()}
        cycle["trained"] = device(state.inventory())
        before = snapshot(state.inventory())
        state.module.to("cpu")
        cycle["offloaded"] = device(state.inventory())
        state.module.to("cuda")
        cycle["loaded"] = device(state.inventory())
        cycle["round_trip"] = differing(before, snapshot(state.inventory()))
        cycle["shards_wrong"] = shards_checked(state)
        facts["cycles"].append(cycle)
        del before


def main() -> None:
    kind, rank, shards, blocks, out = sys.argv[1:6]
    facts: dict[str, Any] = {}
    name = "rank"
    try:
        with contextlib.ExitStack() as stack:
            if kind == "fake":
                from offloadprobe.engines.fsdp2.ranks_fake import fake_rank

                world = stack.enter_context(fake_rank(int(rank), int(shards), device="cuda"))
            else:
                from offloadprobe.engines.fsdp2.ranks_nccl import nccl_ranks

                world = stack.enter_context(nccl_ranks())
            name = f"rank{world.rank}"
            run(world, int(blocks), facts)
    except BaseException:
        facts["error"] = traceback.format_exc()
        raise
    finally:
        (Path(out) / f"{name}.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main()
