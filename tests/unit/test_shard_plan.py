"""``plan --engine fsdp2`` against what the H200 measured: verl FSDP2's pinned bytes per
rank, projected from the preset's shapes, within 2% of the caching host allocator's own
figure (``host_memory_stats`` read after the offload, committed in benchmarks/results),
and the uneven shards counted as the engine's readings counted them there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offloadprobe.plan.shard_plan import project_shards

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"


@pytest.mark.parametrize("shards", [8, 24])
def test_verl_fsdp2_pinned_bytes_match_the_h200_within_2_percent(shards):
    doc = json.loads((RESULTS / f"h200-2026-12-04-fsdp2-readings-{shards}.json").read_text())
    (run,) = doc["runs"]
    measured = run["residency"][-1]["engine_readings"]
    (rank,) = project_shards("qwen2.5-7b", 4, shards, rank=shards - 1).ranks
    assert rank.verl_pinned_bytes == pytest.approx(measured["pinned_owned_bytes"], rel=0.02)
    assert rank.uneven == measured["shards_uneven"]
    # an uneven shard's pinned block goes back to the cache: only the even ones stay pinned
    assert measured["shards_pinned"] == measured["shards"] - measured["shards_uneven"]


def test_power_of_two_shapes_pin_what_they_move_but_the_smallest_blocks():
    plan = project_shards("plain", 2, 4)
    assert [r.uneven for r in plan.ranks] == [0, 0, 0, 0]
    # each block a power of two already; only the norms' 256-byte shards round up
    assert all(r.moved_bytes < r.verl_pinned_bytes < 1.01 * r.moved_bytes for r in plan.ranks)
    qwen = project_shards("qwen2.5-7b", 2, 8, rank=0).ranks[0]
    assert qwen.verl_pinned_bytes > 1.8 * qwen.moved_bytes  # 3584 x 18944: far from one


def test_the_node_adds_its_ranks_and_uneven_ranks_carry_padding():
    plan = project_shards("qwen2.5-7b", 2, 24)
    assert plan.node_ranks == 8
    assert plan.node_pinned_bytes == sum(r.verl_pinned_bytes for r in plan.ranks[:8])
    assert plan.ranks[-1].padding_bytes > 0 and plan.ranks[-1].uneven > plan.ranks[0].uneven


def test_the_cli_prints_every_rank_at_80_columns_and_show_reprints_it(invoke, tmp_path):
    out = tmp_path / "plan.json"
    args = ("plan", "--engine", "fsdp2", "--preset", "qwen2.5-7b", "--layers", "4")
    result = invoke(*args, "--shards", "8", "--json", str(out), columns=80)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "node of 8 ranks: verl FSDP2 pins" in " ".join(result.stdout.split())
    assert sum(line.split()[:1] == [str(r)] for r in range(8) for line in lines) == 8
    assert invoke("show", str(out), columns=80).stdout == result.stdout
    doc = json.loads(out.read_text())
    assert doc["kind"] == "shard plan" and len(doc["ranks"]) == 8


def test_a_scenario_with_the_fsdp2_engine_exits_2_in_one_line(invoke):
    result = invoke("plan", "ci-small", "--engine", "fsdp2")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
