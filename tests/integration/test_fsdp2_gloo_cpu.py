"""The FSDP2 engine on 2 real gloo ranks under CPU emulation (one run for the module:
tests/integration/fsdp2_gloo_worker.py, the plain preset with an uneven vocabulary).

The truth each test reads is the emulated device's registry (every device storage it
holds, by bytes) and the presets' shard arithmetic, never the inventory under test: the
inventory must name every byte the registry holds, the registry must hold exactly the
bytes the arithmetic says, a trivial offload's round trip is bit-exact by key and a
corrupted host copy is found by key, and verl's ``model.to("cpu")`` moves the shards off
the emulated device (a DTensor moves by its local shard).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.fsdp2_gloo_worker import CORRUPTED

pytestmark = pytest.mark.processes(2)  # the two gloo ranks
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp2_gloo")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "tests.integration.fsdp2_gloo_worker"]
    procs = [
        subprocess.Popen(
            [*argv, str(r), "2", str(out)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = []
    try:
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    found = []
    for r, log in enumerate(logs):
        path = out / f"rank{r}.json"
        found.append(json.loads(path.read_text()) if path.exists() else {"error": log[-4000:]})
    return found


def test_both_ranks_ran_to_the_end(ranks):
    for rank in ranks:
        assert "error" not in rank, rank["error"][-3000:]


def test_the_inventory_names_every_byte_on_the_emulated_device(ranks):
    for rank in ranks:
        for moment in ("built", "trained", "offloaded", "to_cpu", "to_cuda"):
            seen = rank[moment]
            assert seen["unnamed"] == [], (rank["rank"], moment)
            assert seen["named"] == seen["registry"], (rank["rank"], moment)
        assert "gloo" in rank["note"] and "emulated" in rank["note"]


def test_the_emulated_device_holds_exactly_the_shards(ranks):
    # padded fp32 shards, their packed padded gradients, unpadded moments, the batch
    for rank in ranks:
        assert rank["trained"]["registry"] == rank["arithmetic"], rank["rank"]
        owners = rank["trained"]["owners"]
        assert set(owners) == {"sharded_param", "sharded_grad", "exp_avg", "exp_avg_sq", "batch"}
    # rank 1 holds 500 of the 1001 vocabulary rows, in storage padded to 501
    assert ranks[0]["uneven"] == [] and ranks[1]["uneven"] == ["embed.weight", "head.weight"]
    one, zero = ranks[1]["trained"]["owners"], ranks[0]["trained"]["owners"]
    assert one["sharded_param"] == zero["sharded_param"]  # padded alike
    assert zero["exp_avg"] - one["exp_avg"] == 2 * 256 * 4  # one row of each, unpadded


def test_both_ranks_train_the_same_model(ranks):
    for rank in ranks:
        first, later = rank["losses"]
        assert 0 < later < first  # trained, after every round trip below
    assert ranks[0]["losses"] != ranks[1]["losses"]  # each rank its own batch


def test_a_trivial_offload_round_trips_bit_exact_and_a_corruption_is_named(ranks):
    for rank in ranks:
        assert rank["offloaded"]["owners"] == {"batch": 2 * 8 * 8}  # all else moved or freed
        assert rank["round_trip"] == []
        assert rank["corrupted"] == [CORRUPTED]
        assert rank["undone"] == []


def test_verl_model_to_cpu_moves_every_shard_off_the_device_and_back(ranks):
    for rank in ranks:
        trained, off, on = rank["trained"], rank["to_cpu"], rank["to_cuda"]
        assert set(off["owners"]) == {"exp_avg", "exp_avg_sq", "batch"}  # the optimizer stays
        assert off["registry"] == trained["registry"] - (
            trained["owners"]["sharded_param"] + trained["owners"]["sharded_grad"]
        )
        assert on["owners"]["sharded_param"] == trained["owners"]["sharded_param"]
        assert rank["to_round_trip"] == []
