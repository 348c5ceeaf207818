"""The FSDP2 engine on CUDA (marker ``cuda``): Qwen2.5-7B's shapes, rank r of N through
the fake process group on one GPU, and real NCCL ranks where there are 2 GPUs
(tests/gpu/fsdp2_cuda_worker.py, a fresh process per run).

The truth is the caching allocator's requested bytes (``requested_bytes.all.current``,
cuBLAS's workspaces cleared first), never the inventory under test: the inventory must
name every requested byte, after training and after verl's blocking
FSDP2 offload (``model.to("cpu")``), on every cycle; each shard's storage is the presets'
padded chunk; the round trip is bit-exact by key. Each run prints its figures by owner.
Margin: 64 MiB, for what no engine owns and clearing cuBLAS's workspaces may leave (a
cuBLASLt workspace); the 1.08 GiB the reference saw stay behind is far above it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024**2
UNOWNED = 64 * MiB
WORKER = [sys.executable, "-m", "tests.gpu.fsdp2_cuda_worker"]


def _ranks(argv: list[str], out: Path, timeout: int = 600) -> list[dict]:
    proc = subprocess.run(
        argv, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=timeout
    )
    found = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert found and not any("error" in f for f in found), found
    return found


def _show(rank: dict) -> None:
    print(f"\n{rank['kind']} rank {rank['rank']} of {rank['shards']}: {rank['note']}")
    moments = [("built", rank["built"])]
    for i, cycle in enumerate(rank["cycles"]):
        moments += [(f"{i} {p}", cycle[p]) for p in ("trained", "offloaded", "loaded")]
    for label, seen in moments:
        owners = ", ".join(f"{o} {n / MiB:.1f}" for o, n in seen["owners"].items())
        unnamed = (seen["requested"] - seen["named"]) / MiB
        print(
            f"  {label:<12} requested {seen['requested'] / MiB:9.1f} MiB, unnamed "
            f"{unnamed:6.2f} MiB: {owners}"
        )


def _check(rank: dict) -> None:
    _show(rank)
    assert rank["shards_wrong"] == []
    moments = [rank["built"]]
    for cycle in rank["cycles"]:
        assert cycle["round_trip"] == [] and cycle["shards_wrong"] == []
        moments += [cycle["trained"], cycle["offloaded"], cycle["loaded"]]
        assert set(cycle["offloaded"]["owners"]) <= {"exp_avg", "exp_avg_sq", "batch"}, cycle
    for seen in moments:
        assert 0 <= seen["requested"] - seen["named"] <= UNOWNED, seen


@pytest.mark.parametrize(("rank", "shards"), [(7, 8), (23, 24)])
def test_a_fake_rank_of_qwen25_names_every_device_byte(tmp_path, rank, shards):
    (found,) = _ranks([*WORKER, "fake", str(rank), str(shards), "2", str(tmp_path)], tmp_path)
    assert found["kind"] == "fake" and "collectives are not" in found["note"]
    assert (found["uneven"] == 0) if shards == 8 else (found["uneven"] > 0)
    _check(found)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_nccl_ranks_of_qwen25_name_every_device_byte(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    argv = [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "tests.gpu.fsdp2_cuda_worker"]
    found = _ranks([*argv, "nccl", "-", "-", "2", str(tmp_path)], tmp_path)
    assert [f["rank"] for f in found] == [0, 1] and all(f["kind"] == "nccl" for f in found)
    for rank in found:
        _check(rank)
    assert found[0]["cycles"][0]["loss"] != found[1]["cycles"][0]["loss"]  # own batches
