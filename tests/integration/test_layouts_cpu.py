"""Parallel layouts on CPU: two gloo ranks under torchrun, real megatron-core parallel state.

One torchrun launch runs every layout in turn (tests/integration/ranks_probe.py): tp 2,
pp 2, MoE with ep 2 (dp 2) and pp 2 with two virtual stages. Each rank's record must be a
whole, intact run over that rank's own buffers, and the buffers must be the layout's share
of the model (checked by parameter arithmetic, not by the code under test).
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offloadprobe.core.config import ModelConfig
from tests.conftest import SUBPROCESS_TIMEOUT

pytestmark = pytest.mark.processes(3)  # one torchrun agent, two ranks

ROOT = Path(__file__).resolve().parents[2]
DENSE = {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 4, "vocab_size": 1024,
         "seq_length": 32, "micro_batch_size": 1}  # fmt: skip
MOE = {**DENSE, "num_experts": 4, "moe_router_topk": 2}
CASES = {
    "tp2": {"parallel": {"tp": 2}, "model": DENSE},
    "pp2": {"parallel": {"pp": 2}, "model": DENSE},
    "ep2": {"parallel": {"ep": 2}, "model": MOE},
    "vpp2": {"parallel": {"pp": 2, "vpp": 2}, "model": {**DENSE, "num_layers": 4}},
}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "tests.integration.ranks_probe", str(out), json.dumps(CASES)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {
        (name, rank): json.loads((out / f"{name}-rank{rank}.json").read_text())
        for name in [*CASES, "collectives"]
        for rank in (0, 1)
    }


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
        assert record["failure"] is None and record["not_offloaded"] == []
        assert [p["phase"] for p in record["phases"]] == ["train", "offload", "load"]
        assert record["integrity"] == [] and record["summary"]["integrity_ok"]
        assert record["payload_bytes"] == doc["own"]["param_data_bytes"] > 0
        assert doc["world"]["rank"] == rank and doc["world"]["world_size"] == 2
        assert "CPU emulation" in doc["note"]
        assert "reduce_scatter_tensor is an in-place all_reduce" in doc["note"]
        assert math.isfinite(doc["own"]["loss"])
    # every rank reports the same loss (the pipeline's last stage broadcasts it)
    assert ranks[case, 0]["own"]["loss"] == ranks[case, 1]["own"]["loss"]


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
