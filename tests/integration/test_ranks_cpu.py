"""Ranks on CPU: gloo ranks under the user's own torchrun, real megatron-core parallel state.

One launch serves the file (tests/integration/ranks_probe.py): two torchrun agents on
localhost, two nodes of one rank each (c10d rendezvous). Each rank checks gloo's
collectives against their emulation, runs every layout of CASES in turn (tp 2, pp 2, MoE
with ep 2 and dp 2, pp 2 with two virtual stages), and then the user's command line
``offloadprobe run --ep 2`` on an MoE model: ranks grouped by torchrun's node rank, rank 0
reporting for both nodes. Each record must be a whole, intact run over that rank's own
buffers, and the buffers must be the layout's share of the model (checked by parameter
arithmetic, not by the code under test). The node-level repro is in test_node_repro_cpu.
Node figures are noisy measurements: asserted as invariants with margins.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.records import ResidencyFact, report_from_dict
from offloadprobe.core.verdicts import residency_problems
from tests.conftest import ROOT, SUBPROCESS_TIMEOUT

pytestmark = pytest.mark.processes(4)  # two torchrun agents, one rank each

MiB = 1024**2
DENSE = {
    "num_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "vocab_size": 1024,
    "seq_length": 32,
    "micro_batch_size": 1,
}
MOE = {**DENSE, "num_experts": 4, "moe_router_topk": 2}
CASES = {
    "tp2": {"parallel": {"tp": 2}, "model": DENSE},
    "pp2": {"parallel": {"pp": 2}, "model": DENSE},
    "ep2": {"parallel": {"ep": 2}, "model": MOE},
    "vpp2": {"parallel": {"pp": 2, "vpp": 2}, "model": {**DENSE, "num_layers": 4}},
}


MOE_CLI = [
    "--layers",
    "2",
    "--hidden",
    "256",
    "--heads",
    "4",
    "--vocab",
    "1024",
    "--num-experts",
    "4",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--device",
    "cpu",
]


def _margin(nbytes: float) -> float:
    """Page tables, allocator slack and kernel memory the cgroup charges beside RSS."""
    return 0.02 * nbytes + 4 * MiB


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Launch:
    out: Path
    streams: list[tuple[str, str]]
    """Each agent's (stdout, stderr)."""


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> Launch:
    out = tmp_path_factory.mktemp("ranks")
    cli = [
        "run",
        "--ep",
        "2",
        *MOE_CLI,
        "--strategy",
        "naive",
        "--cycles",
        "1",
        # the no-offload comparison at ep 2 is the ep2 case's: this run is the nodes' report
        "--no-reference-check",
        "--no-progress",
        "--json",
        str(out / "two-nodes.json"),
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        "--rdzv-id",
        f"op-test-{os.getpid()}",
        "-m",
        "tests.integration.ranks_probe",
        str(out),
        json.dumps(CASES),
        json.dumps(cli),
    ]
    # two "nodes" on one host: one intra-op thread per rank, as torchrun gives co-located ranks
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the checkout is on PYTHONPATH (conftest)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    agents = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    streams = [a.communicate(timeout=SUBPROCESS_TIMEOUT) for a in agents]
    codes = [a.returncode for a in agents]
    assert codes == [0, 0], "\n".join(err[-3000:] for _, err in streams)
    return Launch(out=out, streams=streams)


@pytest.fixture(scope="module")
def ranks(launch) -> dict:
    return {
        (name, rank): json.loads((launch.out / f"{name}-rank{rank}.json").read_text())
        for name in [*CASES, "collectives"]
        for rank in (0, 1)
    }


def test_two_torchrun_agents_are_two_nodes(launch):
    """An MoE model expert parallel across the two nodes (ep 2, dp 2): ranks are grouped by
    torchrun's node rank, every rank offloads its own expert shard, rank 0 reports for
    both nodes."""
    out = launch.out / "two-nodes.json"
    results = launch.streams
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
    model = ModelConfig(
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=1024,
        seq_length=32,
        num_experts=4,
    )
    expert_params = 2 * 4 * (8 * 256 * 256 + 5 * 256)  # layers x experts x (fc1 + fc2)
    # ep 2: each rank holds the non-expert parameters and half of the experts (bf16), plus
    # DDP's bucket padding (well under 1 MiB at this size).
    expected = 2 * (model.param_count - expert_params // 2)
    for rank in world.ranks:
        assert expected <= rank.payload_bytes <= expected + MiB


def test_emulated_collectives_give_gloos_results_without_its_temporaries(ranks):
    for rank in (0, 1):
        found = ranks["collectives", rank]
        assert found["reduce_scatter_equal"] and found["all_gather_equal"]
        assert found["separate_input_ok"]
        # in place, as on a GPU: far below the buffer (gloo's own copies the whole of it)
        for name in ("reduce_scatter_emulated_peak", "all_gather_emulated_peak"):
            assert found["peaks"][name] < found["buffer_bytes"] // 8, (name, found["peaks"])


@pytest.mark.parametrize("case", list(CASES))
def test_every_rank_runs_intact_over_its_own_buffers(ranks, case):
    for rank in (0, 1):
        doc = ranks[case, rank]
        record = doc["record"]
        assert record["failure"] is None
        assert not residency_problems([ResidencyFact(**f) for f in record["residency"]])
        assert [p["phase"] for p in record["phases"]] == ["train", "offload", "load"]
        assert record["integrity"] == [] and record["summary"]["integrity_ok"]
        assert record["payload_bytes"] == doc["own"]["param_data_bytes"] > 0
        assert doc["world"]["rank"] == rank and doc["world"]["world_size"] == 2
        assert "CPU emulation" in doc["note"]
        assert "reduce_scatter_tensor is an in-place all_reduce" in doc["note"]
        assert math.isfinite(_train_loss(doc))
    # every rank reports the same loss (the pipeline's last stage broadcasts it)
    assert _train_loss(ranks[case, 0]) == _train_loss(ranks[case, 1])


def _train_loss(doc: dict) -> float:
    """The loss of the record's first train step (a fresh model: before any offload)."""
    train = next(p for p in doc["record"]["phases"] if p["phase"] == "train")
    loss = train["loss"]
    assert isinstance(loss, float), train
    return loss


def _full(model: dict) -> int:
    return ModelConfig(**model).param_count


def test_tensor_parallel_ranks_hold_half_the_sharded_weights(ranks):
    h, v, layers = DENSE["hidden_size"], DENSE["vocab_size"], DENSE["num_layers"]
    # split: QKV (3h*h + 3h), projection weight (h*h), fc1 (4h*h + 4h), fc2 weight (4h*h),
    # word embedding and output layer (V*h each); biases after a row split and the
    # LayerNorms and positions are replicated
    split = layers * (12 * h * h + 7 * h) + 2 * v * h
    for rank in (0, 1):
        assert ranks["tp2", rank]["world"]["tp"] == 2
        assert ranks["tp2", rank]["own"]["param_count"] == _full(DENSE) - split // 2


def test_pipeline_stages_split_the_model_between_them(ranks):
    for case, chunks in (("pp2", 1), ("vpp2", 2)):
        model = CASES[case]["model"]
        counts = [ranks[case, r]["own"]["param_count"] for r in (0, 1)]
        assert sum(counts) == _full(model) and min(counts) > 0
        assert all(ranks[case, r]["own"]["chunks"] == chunks for r in (0, 1))


def test_expert_parallel_ranks_hold_their_experts_in_expert_buffers(ranks):
    h, layers, experts = MOE["hidden_size"], MOE["num_layers"], MOE["num_experts"]
    expert_params = layers * experts * (8 * h * h + 5 * h)
    for rank in (0, 1):
        doc = ranks["ep2", rank]
        assert doc["world"]["ep"] == 2 and doc["world"]["dp"] == 2
        assert doc["own"]["expert_buffers"] >= 1
        # half the experts, in bf16, padded at most a little by DDP
        assert 0 <= doc["own"]["expert_param_data_bytes"] - expert_params < 2**16
        assert doc["own"]["param_count"] == _full(MOE) - expert_params // 2


def test_moe_param_count_matches_megatron_at_one_rank():
    from offloadprobe.engine.model.builder import build_probe_model
    from offloadprobe.engine.runtime import open_runtime

    model = ModelConfig(**{**MOE, "num_layers": 1})
    with open_runtime("cpu", 1) as runtime:
        built = build_probe_model(model, runtime, seed=1)
        assert built.param_count == model.param_count


@pytest.mark.parametrize(
    ("model", "parallel", "package", "message"),
    [
        (DENSE, {"cp": 2}, "transformer_engine", "--cp needs TransformerEngine"),
        (MOE, {"tp": 2}, "apex", "--tp above 1 with --num-experts needs sequence parallelism"),
    ],
)
def test_layouts_this_host_cannot_build_are_refused_in_one_line(model, parallel, package, message):
    import importlib.util

    from offloadprobe.core.config import ParallelConfig
    from offloadprobe.core.errors import UsageError
    from offloadprobe.core.world import check_layout

    layout = ParallelConfig(**parallel)
    if importlib.util.find_spec(package) is not None:
        check_layout(ModelConfig(**model), layout)  # the host has it: no refusal
        return
    with pytest.raises(UsageError, match=message) as refused:
        check_layout(ModelConfig(**model), layout)
    assert "\n" not in str(refused.value) and "this host lacks" in str(refused.value)
