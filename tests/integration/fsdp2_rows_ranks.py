"""Every FSDP2 row's round trip on 2 real gloo ranks: ``python fsdp2_rows_ranks.py OUT``.

One process imports torch and forks the two ranks before any parallel op runs (cheaper
than spawning two interpreters). Each rank builds a tiny ``fully_shard``'ed model (an
uneven ``Linear(8, 7)`` whose dim 0 splits 4/3, an even one, a module buffer), AdamW and
one train step, then runs each row for 2 offload/load cycles with a train step between.
The truth is read here, outside the strategies: the bytes by key before the offload
against after the load (``keyed``), the storages the offload left, and the losses
against a run that never offloads. Rank 0 writes the JSON to OUT.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from offloadprobe.engines.fsdp2 import keyed, readings
from offloadprobe.engines.fsdp2.strategies import (
    PAIRS,
    build,
    cpu_offload_pageable,
    cpu_offload_pinned,
    exact,
    exact_optimizer,
    nemo_dtensor,
    nemo_optimizer,
    verl_fsdp1,
    verl_fsdp2,
    verl_fsdp2_blocking,
    verl_optimizer,
)

MODULES = {
    "verl_fsdp2": verl_fsdp2,
    "verl_fsdp2_blocking": verl_fsdp2_blocking,
    "nemo_dtensor": nemo_dtensor,
    "cpu_offload_pageable": cpu_offload_pageable,
    "cpu_offload_pinned": cpu_offload_pinned,
    "exact": exact,
    "verl_optimizer": verl_optimizer,
    "nemo_optimizer": nemo_optimizer,
    "exact_optimizer": exact_optimizer,
}
CYCLES = 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(8, 7), nn.Linear(7, 8))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x) * self.scale


def build_model(policy: Any) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Net()
    for block in model.blocks:
        fully_shard(block, offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def train(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> float:
    gen = torch.Generator().manual_seed(100 + step + dist.get_rank())
    loss = model(torch.randn(4, 8, generator=gen)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def run_row(name: str, opt_name: str | None, corrupt: bool = False) -> dict[str, Any]:
    module = MODULES[name]
    policy = build.build_of(module).offload_policy(can_pin=False)
    model, optimizer = build_model(policy)
    losses = [train(model, optimizer, 0)]
    strategy = module.STRATEGY.build(None)
    opt = MODULES[opt_name].STRATEGY.build(None) if opt_name else None
    out: dict[str, Any] = {"mismatches": [], "freed": [], "homes": [], "blocks": []}
    storages = [_storage_ids(p) for p in build_fsdp_params(model)]
    for cycle in range(CYCLES):
        before = keyed.snapshot(model, optimizer)
        strategy.offload(model)
        if opt is not None:
            opt.offload(optimizer)
        shards = list(build_fsdp_params(model))
        out["freed"].append(
            sum(p._sharded_param_data.untyped_storage().nbytes() == 0 for p in shards)
        )
        homes = readings.shard_homes(model, optimizer, [strategy, opt])
        out["homes"].append([[h.key, h.nbytes, h.home, h.pinned] for h in homes])
        strategy.load(model)
        if opt is not None:
            if opt_name == "verl_optimizer":
                opt.load(optimizer, "cpu")
            else:
                opt.load(optimizer)
        if corrupt and cycle == 1:
            with torch.no_grad():
                model.blocks[0].weight._local_tensor.view(-1)[0] += 1.0
        out["mismatches"].append(keyed.mismatches(before, model, optimizer))
        losses.append(train(model, optimizer, cycle + 1))
    out["losses"] = losses
    out["same_storages"] = storages == [_storage_ids(p) for p in build_fsdp_params(model)]
    if isinstance(strategy, exact.ExactPinned):
        out["blocks"] = [len(strategy.arena._blocks), strategy.arena.host_bytes]
        out["slot_bytes"] = sum(s.nbytes for s in strategy.arena.slots.values())
        out["storage_bytes"] = sum(
            p._sharded_param_data.untyped_storage().nbytes() for p in build_fsdp_params(model)
        ) + sum(b.untyped_storage().nbytes() for b in model.buffers())
    return out


def _storage_ids(fsdp_param: Any) -> tuple[int, int]:
    """The padded shard's storage, and the one the DTensor's local tensor views."""
    return (
        fsdp_param._sharded_param_data.untyped_storage()._cdata,
        fsdp_param.sharded_param._local_tensor.untyped_storage()._cdata,
    )


def build_fsdp_params(model: nn.Module) -> Any:
    from offloadprobe.engines.fsdp2.strategies.common import fsdp_params

    return fsdp_params(model)


def reference() -> list[float]:
    model, optimizer = build_model(build.DEFAULT_BUILD.offload_policy(can_pin=False))
    return [train(model, optimizer, step) for step in range(CYCLES + 1)]


def refusal(name: str, policy_build: Any) -> str:
    model, _ = build_model(policy_build.offload_policy(can_pin=False))
    try:
        module = verl_fsdp1 if name == "verl_fsdp1" else MODULES[name]
        module.STRATEGY.build(None).offload(model)
    except Exception as error:  # the row's one line
        return f"{type(error).__name__}: {error}"
    return "no refusal"


def rank(rank_: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank_, world_size=2)
    result: dict[str, Any] = {"reference": reference(), "rows": {}}
    for name, opt_name in PAIRS.items():
        if name in MODULES:
            try:
                result["rows"][name] = run_row(name, opt_name)
            except Exception as error:  # the row's failure, reported by name
                result["rows"][name] = {"error": f"{type(error).__name__}: {error}"}
    result["corrupt"] = run_row("exact", "exact_optimizer", corrupt=True)["mismatches"]
    result["refusals"] = {
        "verl_fsdp1": refusal("verl_fsdp1", build.DEFAULT_BUILD),
        "cpu_offload_pageable": refusal("cpu_offload_pageable", build.DEFAULT_BUILD),
        "cpu_offload_pinned": refusal("cpu_offload_pinned", build.DEFAULT_BUILD),
    }
    result["pinned_note"] = build.build_of(cpu_offload_pinned).note(can_pin=False)
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, result)
    if rank_ == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


def main() -> None:
    out, port = sys.argv[1], int(sys.argv[2])
    try:
        mp.start_processes(rank, args=(out, port), nprocs=2, start_method="fork")
    except Exception:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
