"""Runs over several ranks on CPU: gloo ranks started by torchrun, one node memory cgroup.

Real processes are what is tested here (torchrun's launcher, the node cgroup, the phase
fences): an MoE model over two torchrun agents (two nodes), one small rank each. The
node-level repro is in test_node_repro_cpu. Node figures are noisy measurements: asserted
as invariants with margins.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.records import report_from_dict
from tests.conftest import ROOT, SUBPROCESS_TIMEOUT

pytestmark = pytest.mark.processes(4)  # two torchrun agents, one rank each

MiB = 1024**2
MOE = ["--layers", "2", "--hidden", "256", "--heads", "4", "--vocab", "1024", "--num-experts",
       "4", "--seq-length", "32", "--micro-batch", "1", "--device", "cpu"]  # fmt: skip


def _margin(nbytes: float) -> float:
    """Page tables, allocator slack and kernel memory the cgroup charges beside RSS."""
    return 0.02 * nbytes + 4 * MiB


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_torchrun_agents_are_two_nodes(tmp_path):
    """The user's own torchrun, two agents on localhost as two nodes (c10d rendezvous), an
    MoE model expert parallel across them (ep 2, dp 2): ranks are grouped by torchrun's
    node rank, every rank offloads its own expert shard, rank 0 reports for both nodes."""
    out = tmp_path / "two-nodes.json"
    endpoint = f"127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
           "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
           "--rdzv-id", f"op-test-{os.getpid()}", "-m", "offloadprobe", "run", "--ep", "2",
           *MOE, "--strategy", "naive", "--cycles", "1", "--no-progress",
           "--json", str(out)]  # fmt: skip
    # two "nodes" on one host: one intra-op thread per rank, as torchrun gives co-located ranks
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = [a.communicate(timeout=SUBPROCESS_TIMEOUT) for a in agents]
    codes = [a.returncode for a in agents]
    assert codes == [0, 0], "\n".join(err[-2000:] for _, err in results)
    world = report_from_dict(json.loads(out.read_text())).runs[0].world
    assert world.nnodes == 2 and world.layout["ep"] == 2 and world.layout["dp"] == 2
    assert sorted(n.node_rank for n in world.nodes) == [0, 1]
    by_node = {n.node_rank: n.ranks for n in world.nodes}
    assert sorted(r for ranks in by_node.values() for r in ranks) == [0, 1]
    assert all(len(ranks) == 1 for ranks in by_node.values())
    for rank in world.ranks:
        assert rank.place.rank in by_node[rank.place.node_rank]
        assert rank.summary is not None and rank.failure is None and rank.integrity == []
    printed = [out for out, _ in results if "node 1: measured" in out]
    assert len(printed) == 1  # rank 0's agent reports for both nodes; the other is quiet
    for row in ("rank 0 (node ", "rank 1 (node ", "node 0: sum", "node 1: measured"):
        assert row in printed[0]
    for node in world.nodes:
        if node.peak_bytes is not None:  # one rank per node: the node is that rank
            own = node.figures["host_peak_bytes"].max
            assert abs(node.peak_bytes - own) <= _margin(own)
    model = ModelConfig(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1024,
                        seq_length=32, num_experts=4)  # fmt: skip
    expert_params = 2 * 4 * (8 * 256 * 256 + 5 * 256)  # layers x experts x (fc1 + fc2)
    # ep 2: each rank holds the non-expert parameters and half of the experts (bf16), plus
    # DDP's bucket padding (well under 1 MiB at this size).
    expected = 2 * (model.param_count - expert_params // 2)
    for rank in world.ranks:
        assert expected <= rank.payload_bytes <= expected + MiB
