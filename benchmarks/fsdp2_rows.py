"""H200 benchmark: FSDP2's offload rows (verl, NeMo-RL, CPUOffloadPolicy, the fix), rank r of N.

One GPU plays rank ``--rank`` of ``--shards`` through PyTorch's fake process group
(``FakeStore``, backend ``fake``): sharding and padding are real, collectives are not (an
all-gather leaves its output as it found it), so the train step computes on whatever the
unsharded buffers hold; nothing here judges its numbers, only that the offload brings
every byte back. Each row runs in a fresh process: a model of ``--layers`` blocks of the
``--shapes`` preset (``fully_shard`` per block and at the root, bf16 parameters and fp32
reduce through ``MixedPrecisionPolicy``, fp32 masters, ``torch.optim.AdamW``), one train
step, then ``--cycles`` offload/load cycles with a train step between.

Per cycle, read outside the strategies: offload and load seconds (synchronized) and GB/s
of the payload (local parameter shards plus both Adam moments); the host peak (VmHWM
after writing 5 to ``/proc/self/clear_refs`` just before the offload), the host held
after the load (RSS over its value before cycle 0) and the cycle's residue (RSS after
the load over its value just before this offload), in payload multiples; pinned
bytes owned and cached (``torch.cuda.host_memory_stats``); shards and moments pinned
after the offload (``Tensor.is_pinned``); device bytes left after the offload
(``torch.cuda.memory_allocated``) and by owner; whether the bytes came back (device-side
fingerprints by key). After the last cycle, one ``malloc_trim(0)`` says how much of the
held host memory was glibc's free heap.

    python benchmarks/fsdp2_rows.py --out benchmarks/results/h200-fsdp2-rows.json
    python benchmarks/fsdp2_rows.py --shards 24 --rank 23 --out ...   # uneven shards
    python benchmarks/fsdp2_rows.py --device cpu --shapes linear:21x16 --layers 2   # tiny
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # offloadprobe from this checkout

ROWS = {  # model row -> optimizer row (None: the policy keeps the state on the host)
    "verl_fsdp2": "verl_optimizer",
    "verl_fsdp2_blocking": "verl_optimizer",
    "verl_fsdp1": "verl_optimizer",
    "nemo_dtensor": "nemo_optimizer",
    "cpu_offload_pinned": None,
    "cpu_offload_pageable": None,
    "exact": "exact_optimizer",
}
PRESETS = {  # hidden, intermediate, heads, kv heads, head dim, qkv bias, q/k norm
    "qwen2.5-7b": (3584, 18944, 28, 4, 128, True, False),
    "qwen3-8b": (4096, 12288, 32, 8, 128, False, True),
    "llama3.1-8b": (4096, 14336, 32, 8, 128, False, False),
    "tiny": (64, 200, 4, 1, 16, True, False),
}
GB = 1e9
BATCH = 4
"""Tokens per train step: the activations stay small beside the payload."""
NOTE = (
    "fake process group: rank {rank} of {shards}; sharding and padding are real, "
    "collectives are not"
)
CPU_NOTE = (
    "--device cpu: the device is host memory, so host figures mix the model's own\n"
    "storages with the offload's; a smoke test of this script, not a reading"
)


def block_class() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        """One decoder layer's weights (or one Linear), a forward that uses each of them."""

        def __init__(self, shapes: str) -> None:
            super().__init__()
            self.kind = shapes
            if shapes.startswith("linear:"):
                out_f, in_f = (int(n) for n in shapes.split(":")[1].split("x"))
                self.lin = nn.Linear(in_f, out_f)
                return
            h, inter, heads, kv, hd, bias, qk_norm = PRESETS[shapes]
            self.q = nn.Linear(h, heads * hd, bias=bias)
            self.k = nn.Linear(h, kv * hd, bias=bias)
            self.v = nn.Linear(h, kv * hd, bias=bias)
            self.o = nn.Linear(heads * hd, h, bias=False)
            self.gate = nn.Linear(h, inter, bias=False)
            self.up = nn.Linear(h, inter, bias=False)
            self.down = nn.Linear(inter, h, bias=False)
            self.ln1 = nn.Parameter(torch.ones(h))
            self.ln2 = nn.Parameter(torch.ones(h))
            self.norms = (
                nn.ParameterList([nn.Parameter(torch.ones(hd)), nn.Parameter(torch.ones(hd))])
                if qk_norm
                else None
            )

        def forward(self, x: Any) -> Any:
            if self.kind.startswith("linear:"):
                return x + self.lin(x).float().mean()  # every Linear reads the same width
            n = x * self.ln1
            q, k, v = self.q(n), self.k(n), self.v(n)
            if self.norms is not None:
                hd = self.norms[0].numel()
                q = (q.view(*q.shape[:-1], -1, hd) * self.norms[0]).flatten(-2)
                k = (k.view(*k.shape[:-1], -1, hd) * self.norms[1]).flatten(-2)
            x = x + self.o(q * (k.mean(-1, keepdim=True) + v.mean(-1, keepdim=True)))
            n = x * self.ln2
            return x + self.down(torch.nn.functional.silu(self.gate(n)) * self.up(n))

    return Block


def hidden_of(shapes: str) -> int:
    if shapes.startswith("linear:"):
        return int(shapes.split(":")[1].split("x")[1])
    return PRESETS[shapes][0]


def build(args: argparse.Namespace, row_build: Any, device: str) -> tuple[Any, Any]:
    import torch
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    block = block_class()
    with torch.device(device):
        model = nn.Sequential(*[block(args.shapes) for _ in range(args.layers)])
    if row_build.wrap == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy({block}),
            mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
            device_id=torch.cuda.current_device(),
            use_orig_params=False,  # verl's default (fsdp_config.use_orig_params)
        )
    else:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        policy = row_build.offload_policy(can_pin=device == "cuda")
        for layer in model:
            fully_shard(layer, mp_policy=mp, offload_policy=policy)
        fully_shard(model, mp_policy=mp, offload_policy=policy)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train(model: Any, optimizer: Any, device: str, hidden: int) -> None:
    import torch

    x = torch.randn(BATCH, hidden, device=device)
    model(x).float().square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def payload_bytes(model: Any, optimizer: Any) -> int:
    """Local parameter shards plus every optimizer moment, as the offload asks for them."""
    from offloadprobe.engines.fsdp2.strategies.common import local_tensor

    params = sum(
        local_tensor(p).numel() * local_tensor(p).element_size() for p in model.parameters()
    )
    moments = sum(
        local_tensor(v).numel() * local_tensor(v).element_size()
        for state in optimizer.state.values()
        for k, v in state.items()
        if k in ("exp_avg", "exp_avg_sq")
    )
    return params + moments


def project(model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What ``engines/fsdp2/layout.py`` (``plan``) projects for verl FSDP2 on this model's
    real shapes and this rank: beside the measured figures, its error shows."""
    from offloadprobe.engines.fsdp2.layout import Tensor, rank_layout

    units = [
        [Tensor(name=f"{i}.{n}", shape=tuple(p.shape)) for n, p in layer.named_parameters()]
        for i, layer in enumerate(model)
    ]
    got = rank_layout(units, args.shards, args.rank)
    return {
        "requested": got.requested,
        "pinned_held": got.pinned_held,
        "pinned_x": got.pinned_ratio,
        "host_peak_x": got.peak_ratio,
        "uneven": got.uneven,
        "padding_bytes": got.padding_bytes,
        "exact_host": got.exact_host,
    }


def one_row(args: argparse.Namespace) -> dict[str, Any]:
    import importlib

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from offloadprobe.engine.runtime.glibc_malloc import trim_host_heap
    from offloadprobe.engines.fsdp2 import keyed, readings
    from offloadprobe.engines.fsdp2.strategies import build as builds
    from offloadprobe.measure.probes.host import read_status, reset_hwm

    device = args.device
    package = "offloadprobe.engines.fsdp2.strategies"
    module = importlib.import_module(f"{package}.{args.row}")
    row_build = builds.build_of(module)
    if row_build.needs_gpu and device != "cuda":
        return {"row": args.row, "refused": f"{args.row} needs a GPU (FSDP1 refuses CPU)"}
    if device == "cuda":
        torch.cuda.set_device(0)
    rss_start = readings.rss()
    dist.init_process_group("fake", rank=args.rank, world_size=args.shards, store=FakeStore())
    model, optimizer = build(args, row_build, device)
    hidden = hidden_of(args.shapes)
    train(model, optimizer, device, hidden)
    opt_name = ROWS[args.row]
    strategy = module.STRATEGY.build(None)
    opt = (
        importlib.import_module(f"{package}.{opt_name}").STRATEGY.build(None) if opt_name else None
    )
    device_id = torch.cuda.current_device() if device == "cuda" else "cpu"
    payload = payload_bytes(model, optimizer)
    projected = project(model, args) if row_build.wrap == "fully_shard" else None
    if payload == 0:
        return {"row": args.row, "refused": f"rank {args.rank} of {args.shards} holds no bytes"}
    moves = not isinstance(strategy, builds.PolicyKeepsHost)  # the policy rows move nothing
    gc.collect()
    sync(device)
    rss0 = readings.rss()
    cycles = []
    host_sums = any(t.device.type == "cpu" for t in model.parameters()) and device == "cuda"
    for cycle in range(args.cycles):
        before = keyed.fingerprint(model, optimizer)
        if host_sums:  # the sums' host temporaries are the tool's, not the row's
            trim_host_heap()
        sync(device)
        residue = readings.HostResidue()
        residue.start()
        exact_hwm = reset_hwm()
        start = time.perf_counter()
        strategy.offload(model)
        sync(device)
        model_s = time.perf_counter() - start
        if opt is not None:
            opt.offload(optimizer)
        sync(device)
        offload_s = time.perf_counter() - start
        hwm_offload = read_status()["VmHWM"]
        homes = readings.shard_homes(model, optimizer, [s for s in (strategy, opt) if s])
        pin = readings.pinning(homes)
        pinned_off = readings.pinned_now()
        allocated = torch.cuda.memory_allocated() if device == "cuda" else None
        owners = readings.device_owners(model, optimizer) if device == "cuda" else {}
        start = time.perf_counter()
        strategy.load(model)
        if opt is not None:
            if "device_id" in inspect.signature(opt.load).parameters:  # verl's pair
                opt.load(optimizer, device_id)
            else:
                opt.load(optimizer)
        sync(device)
        load_s = time.perf_counter() - start
        status = read_status()
        left_behind = residue.after_load()
        pinned_load = readings.pinned_now()
        registered = sum(getattr(s, "registered_bytes", 0) for s in (strategy, opt) if s)
        locked_off = registered + (pinned_off.owned if pinned_off else 0)
        locked_load = registered + (pinned_load.owned if pinned_load else 0)
        changed = keyed.changed(before, keyed.fingerprint(model, optimizer))
        if host_sums:
            trim_host_heap()
        cycles.append(
            {
                "cycle": cycle,
                "offload_s": offload_s,
                "offload_model_s": model_s,
                "load_s": load_s,
                "offload_gbps": payload / GB / offload_s if moves and offload_s else None,
                "load_gbps": payload / GB / load_s if moves and load_s else None,
                "host_peak_offload_x": (hwm_offload - rss0) / payload,
                "host_peak_x": (status["VmHWM"] - rss0) / payload,
                "host_peak_exact": exact_hwm,
                "held_after_load_x": (status["VmRSS"] - rss0) / payload,
                "residue_x": left_behind / payload,
                "resident_over_start_x": (status["VmRSS"] - rss_start) / payload,
                "pinned_owned_after_offload": pinned_off.owned if pinned_off else None,
                "pinned_owned_after_load": pinned_load.owned if pinned_load else None,
                "pinned_cached_after_load": pinned_load.cached if pinned_load else None,
                "pinned_owned_x": pinned_load.owned / payload if pinned_load else None,
                "registered_bytes": registered,
                "locked_x": locked_load / payload if pinned_load else None,
                "locked_over_requested": readings.rounding(locked_off, pin.requested_pinned)
                if pinned_off
                else None,
                "shards": pin.shards,
                "pinned_after_offload": pin.pinned,
                "on_host_after_offload": pin.on_host,
                "on_device_after_offload": pin.on_device,
                "device_allocated_after_offload": allocated,
                "device_by_owner": owners,
                "device_no_owner": allocated - sum(owners.values())
                if allocated is not None
                else None,
                "changed_keys": changed,
            }
        )
        train(model, optimizer, device, hidden)
    trim_before, trim_after = readings.glibc_share()
    dist.destroy_process_group()
    return {
        "row": args.row,
        "optimizer_row": opt_name,
        "payload_bytes": payload,
        "bit_exact": all(not c["changed_keys"] for c in cycles),
        "glibc_heap_x": (trim_before - trim_after) / payload,
        "fingerprint_trims": host_sums,
        "projected_verl_fsdp2": projected,
        "build_note": row_build.note(can_pin=device == "cuda"),
        "cycles": cycles,
    }


def versions() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "glibc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (  # title, unit, width, the cycle's key, format
    ("row", "", 20, None, ""),
    ("cy", "", 2, "cycle", "d"),
    ("off", "s", 6, "offload_s", ".2f"),
    ("off", "GB/s", 6, "offload_gbps", ".1f"),
    ("load", "s", 6, "load_s", ".2f"),
    ("peak", "x", 6, "host_peak_x", ".2f"),
    ("held", "x", 6, "held_after_load_x", ".2f"),
    ("locked", "x", 7, "locked_x", ".2f"),
    ("lock/", "req", 6, "locked_over_requested", ".2f"),
    ("pinned", "shards", 9, None, ""),
    ("dev", "GiB", 5, None, ""),
)
"""79 columns: CI logs and terminals read it as it is."""


def table(rows: list[dict[str, Any]]) -> str:
    """One line per row and cycle, from the records only."""
    head = [f"{t:<20}" if w == 20 else f"{t:>{w}}" for t, _, w, _, _ in COLUMNS]
    unit = [f"{u:<20}" if w == 20 else f"{u:>{w}}" for _, u, w, _, _ in COLUMNS]
    lines = ["".join(head), "".join(unit)]
    for row in rows:
        if "cycles" not in row:
            lines.append(f"{row['row'][:20]:<21}{row.get('refused') or row.get('error')}"[:80])
            continue
        for c in row["cycles"]:
            left = c["device_allocated_after_offload"]
            cells = [f"{row['row'][:20]:<20}"]
            for _, _, width, key, spec in COLUMNS[1:-2]:
                cells.append(f"{_fmt(c[key], spec):>{width}}")
            cells.append(f"{c['pinned_after_offload']:>5}/{c['shards']:<3}")
            cells.append(f"{_fmt(None if left is None else left / 2**30, '.2f'):>5}")
            lines.append("".join(cells))
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="model rows, comma-separated")
    parser.add_argument(
        "--shapes", default="qwen2.5-7b", help=f"{', '.join(PRESETS)}, linear:OUTxIN"
    )
    parser.add_argument("--layers", type=int, default=12, help="blocks (12: 4.0 GiB at 8 shards)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rank", type=int, default=None, help="default: the last (its padding)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: stdout only)")
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)  # one row, in its child
    args = parser.parse_args(argv)
    args.rank = args.shards - 1 if args.rank is None else args.rank
    if not 0 <= args.rank < args.shards:
        parser.error(f"--rank {args.rank} is not one of --shards {args.shards}")
    unknown = [r for r in args.rows.split(",") if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    if not (args.shapes in PRESETS or args.shapes.startswith("linear:")):
        parser.error(f"--shapes {args.shapes}: one of {', '.join(PRESETS)} or linear:OUTxIN")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.row is not None:
        print(json.dumps(one_row(args)))
        return 0
    rows = []
    for row in args.rows.split(","):
        child = [a for a in (argv if argv is not None else sys.argv[1:])]
        done = subprocess.run(
            [sys.executable, __file__, *child, "--row", row, "--rank", str(args.rank)],
            capture_output=True,
            text=True,
        )
        try:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except (json.JSONDecodeError, IndexError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"row": row, "error": f"exit {done.returncode}: {tail}"})
    result = {
        **versions(),
        "note": NOTE.format(rank=args.rank, shards=args.shards),
        "cpu_note": CPU_NOTE if args.device == "cpu" else None,
        "shapes": args.shapes,
        "layers": args.layers,
        "shards": args.shards,
        "rank": args.rank,
        "cycles": args.cycles,
        "rows": rows,
    }
    print(result["note"])
    if result["cpu_note"]:
        print(CPU_NOTE)
    print(table(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all("cycles" in r and r["bit_exact"] for r in rows if "refused" not in r) else 1


if __name__ == "__main__":
    sys.exit(main())
