"""FSDP2's rows on 2 real gloo ranks (CPU): every round trip bit-exact by key, the fixed
row's storages really freed and its host slices exactly their bytes, made once; a
corrupted shard named by its key; a row on the wrong build refused in one line.

One process starts both ranks once for the module (``fsdp2_rows_ranks.py``), some 5 CPU-s.
On CPU ``model.to("cpu")`` is the identity: the ``.to`` rows move nothing here (their
pinning and rounding are GPU readings, ``benchmarks/fsdp2_rows.py``); what is checked for
them is that the field's calls keep FSDP2's state whole (bytes, losses)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes(1)
WORKER = Path(__file__).with_name("fsdp2_rows_ranks.py")
ROWS = (
    "verl_fsdp2",
    "verl_fsdp2_blocking",
    "nemo_dtensor",
    "cpu_offload_pageable",
    "cpu_offload_pinned",
    "exact",
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp2") / "ranks.json"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(WORKER), str(out), str(_port())],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("row", ROWS)
def test_round_trip_is_bit_exact_and_training_unchanged(ranks, row) -> None:
    for result in ranks:
        got = result["rows"][row]
        assert "error" not in got, got.get("error")
        assert got["mismatches"] == [[], []]
        # the optimizer still steps the same tensors: the losses of a run that never offloads
        assert got["losses"] == result["reference"]


def test_exact_frees_every_shard_into_exact_slices_made_once(ranks) -> None:
    for result in ranks:
        got = result["rows"]["exact"]
        assert got["freed"] == [4, 4]  # all four shards' storages, both cycles
        # every storage's bytes exactly (the uneven rank's padded shard too), one block, reused
        assert got["slot_bytes"] == got["storage_bytes"]
        assert got["blocks"] == [1, 4096]
        # no padding copy replaced an uneven shard: same storages, viewed by the same DTensor
        assert got["same_storages"] is True
        homes = {key: (n, home) for key, n, home, _ in got["homes"][0]}
        assert homes["blocks.0.weight"] == (4 * 8 * 4, "host")  # 4/3 split, padded to 4 rows
        assert homes["blocks.0.weight/exp_avg"][1] == "host"


def test_uneven_rank_holds_the_padding(ranks) -> None:
    """Rank 1 holds 3 of Linear(8, 7)'s 7 rows; its exp_avg is unpadded, its shard padded."""
    homes = {key: n for key, n, _, _ in ranks[1]["rows"]["exact"]["homes"][0]}
    assert homes["blocks.0.weight"] == 4 * 8 * 4
    assert homes["blocks.0.weight/exp_avg"] == 3 * 8 * 4


def test_nothing_is_pinned_without_cuda(ranks) -> None:
    for result in ranks:
        for row in ROWS:
            assert not any(pinned for *_, pinned in result["rows"][row]["homes"][0])


def test_a_corrupted_shard_is_named_by_its_key(ranks) -> None:
    for result in ranks:
        assert result["corrupt"] == [[], ["blocks.0.weight"]]


def test_rows_on_the_wrong_build_refuse_in_one_line(ranks) -> None:
    refusals = ranks[0]["refusals"]
    assert refusals["verl_fsdp1"].startswith("UsageError: verl_fsdp1 moves FSDP1's flat")
    for row in ("cpu_offload_pageable", "cpu_offload_pinned"):
        assert refusals[row].startswith("UsageError: this row needs the model built with")
    assert all("\n" not in line for line in refusals.values())
    assert "pin_memory=False" in ranks[0]["pinned_note"]
