"""Runs over several ranks on CUDA: NCCL ranks through torchrun's launcher, one node
cgroup (marker ``cuda``; needs 2 GPUs)."""

import json

import pytest
import torch

from offloadprobe.core.records import report_from_dict

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs"),
]

MiB = 1024**2
MODEL = ["--layers", "2", "--payload", "512MiB", "--seq-length", "64", "--cycles", "2"]


def _margin(nbytes: float) -> float:
    return 0.02 * nbytes + 16 * MiB


def test_two_nccl_ranks_measure_themselves_and_the_node(cli, tmp_path):
    out = tmp_path / "ranks.json"
    proc = cli(
        "run",
        "--device",
        "cuda",
        "--nproc-per-node",
        "2",
        "--strategy",
        "naive",
        "--no-progress",
        *MODEL,
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = report_from_dict(json.loads(out.read_text())).runs[0].world
    assert [r.place.local_rank for r in world.ranks] == [0, 1]
    assert all(r.summary.pinned_reserved_bytes for r in world.ranks)  # real pinned memory
    (node,) = world.nodes
    assert node.peak_bytes is not None, node.cgroup_missing
    largest = node.figures["host_peak_bytes"].max
    total = node.rank_peak_sum_bytes
    assert largest - _margin(largest) <= node.peak_bytes <= total + _margin(total)


def test_moe_expert_parallel_on_two_gpus(cli, tmp_path):
    out = tmp_path / "moe.json"
    proc = cli(
        "run",
        "--device",
        "cuda",
        "--nproc-per-node",
        "2",
        "--ep",
        "2",
        "--num-experts",
        "4",
        "--strategy",
        "registered",
        "--optimizer-strategy",
        "complete",
        "--precision-aware",
        "--no-progress",
        "--layers",
        "2",
        "--payload",
        "256MiB",
        "--seq-length",
        "64",
        "--cycles",
        "2",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = report_from_dict(json.loads(out.read_text())).runs[0].world
    assert world.layout["ep"] == 2
    for rank in world.ranks:  # each rank moved its own shards of both parts, bit-exact
        assert rank.summary.params.moved_bytes == rank.payload_bytes
        assert rank.summary.optimizer is not None and rank.summary.optimizer.moved_bytes > 0
        assert rank.integrity == [] and rank.not_offloaded == []
