"""Projection arithmetic: event sequences mirror the strategies, figures add up, and the
probe projection agrees with what offloadprobe run measured on an H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offloadprobe.core.config import ModelConfig, size_for_payload
from offloadprobe.core.errors import UsageError
from offloadprobe.layout.buffers import lay_out_buffer
from offloadprobe.layout.inputs import DdpOptions
from offloadprobe.layout.parameters import ParamEntry
from offloadprobe.layout.pinned import Alloc, Free, page_rounded, replay
from offloadprobe.plan.probe import emulated_host, probe_payload, project_probe
from offloadprobe.plan.projection import (
    gpu_left_per_device,
    optimizer_host,
    param_events,
    rank_host,
)
from offloadprobe.plan.scenario_plan import project_scenario
from offloadprobe.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
MiB, GiB = 2**20, 2**30


def test_naive_events_follow_the_expression_order() -> None:
    # copy = param_data.cpu().pin_memory(): pageable temporary, pinned copy, temporary
    # gone, and only then the previous copy (the assignment)
    events = param_events("naive", [100], cycles=2, labels=["b"])
    assert events == [
        Alloc(name="b .cpu() pageable temporary", nbytes=100, kind="pageable"),
        Alloc(name="b pinned copy, cycle 0", nbytes=100),
        Free(name="b .cpu() pageable temporary"),
        Alloc(name="b .cpu() pageable temporary", nbytes=100, kind="pageable"),
        Alloc(name="b pinned copy, cycle 1", nbytes=100),
        Free(name="b .cpu() pageable temporary"),
        Free(name="b pinned copy, cycle 0"),
    ]


@pytest.mark.parametrize(
    ("strategy", "kind"),
    [("lazy", "pinned"), ("registered", "registered"), ("pageable", "pageable")],
)
def test_allocate_once_strategies(strategy: str, kind: str) -> None:
    events = param_events(strategy, [10, 20], cycles=3)
    assert [(e.nbytes, e.kind) for e in events] == [(10, kind), (20, kind)]


def test_unknown_strategy_is_bad_input() -> None:
    with pytest.raises(UsageError, match="unknown model strategy 'mystery'"):
        param_events("mystery", [1], cycles=1)


def test_peak_holdings_add_up() -> None:
    replayed = replay(param_events("naive", [5 * GiB, 3 * GiB], cycles=3))
    assert sum(h.nbytes for h in replayed.peak_holdings) == replayed.peak
    assert sum(h.nbytes for h in replayed.final_holdings) == replayed.final


def test_verl_6193_middle_rank() -> None:
    s = load_scenario(SCENARIOS / "verl-6193-pinned-peak.toml")
    stage = s.layout().stages[3]
    naive, lazy, registered = (rank_host(k, stage, 3) for k in ("naive", "lazy", "registered"))
    # 16 GiB + 0.5 GiB pinned held, 13.5 GiB pageable temporary, new 16 GiB block, and the
    # dense buffer's cached 0.5 GiB block
    assert naive.peak == 46.5 * GiB
    assert naive.steady == naive.pinned == 33 * GiB  # two blocks per buffer, one cached
    assert lazy.peak == lazy.steady == lazy.pinned == 16.5 * GiB
    assert registered.peak == sum(page_rounded(b.param_bytes) for b in stage.buffers)
    labels = {t.label: t for t in lazy.terms}
    assert labels["expert pinned block (rounding)"].formula == "PowerOf2Ceil(14495514624)"
    assert labels["expert pinned block (rounding)"].value == 16 * GiB


def test_optimizer_host_rounds_each_tensor_for_to_cpu() -> None:
    s = load_scenario(SCENARIOS / "verl-6193-pinned-peak.toml")
    stage, opt = s.layout().stages[3], s.offload.optimizer_options
    exact = optimizer_host("complete", stage, opt)[0]
    legacy = optimizer_host("legacy", stage, opt)[0]
    assert round(exact / GiB, 2) == 41.73
    assert exact < legacy < 2 * exact  # per-tensor power-of-two blocks (about 1.33x here)
    assert optimizer_host("none", stage, opt)[0] == 0


def test_shard_pieces_cover_every_parameter_element() -> None:
    entries = [ParamEntry(name=str(i), numel=n, formula="") for i, n in enumerate((100, 37, 900))]
    buffer = lay_out_buffer(entries, kind="dense", dp_size=4, bucket_size=None, ddp=DdpOptions())
    assert sum(sum(buffer.shard_pieces(r)) for r in range(4)) == 1037
    assert [sum(buffer.shard_pieces(r)) for r in range(4)] == [
        buffer.shard_numel(r) for r in range(4)
    ]


def test_verl_6635_master_param_left_on_the_gpu() -> None:
    s = load_scenario(SCENARIOS / "verl-6635-master-param.toml")
    limit = s.limit.gpu_memory_per_device
    assert limit is not None
    legacy, fixed = gpu_left_per_device(s, "legacy"), gpu_left_per_device(s, "fixed")
    assert legacy > limit > fixed
    assert round((legacy - s.limit.gpu_reserved_per_device) / GiB, 3) == 7.109


def test_scenario_plan_verdicts_match_expectations() -> None:
    for name in ("verl-6193-pinned-peak.toml", "verl-6635-master-param.toml", "ci-small.toml"):
        plan = project_scenario(load_scenario(SCENARIOS / name))
        for row in plan.strategies:
            if row.expected is not None:
                assert row.outcome == row.expected, (name, row.strategy)


# ------------------------------------------------------------ the probe model


def test_probe_payload_matches_ci_small_scenario() -> None:
    # ci-small's [model] is the probe sized for 56 MiB (one 29,404,160-element buffer)
    model = size_for_payload(ModelConfig(), 56 * MiB)
    s = load_scenario(SCENARIOS / "ci-small.toml")
    assert probe_payload(model) == s.layout().stages[0].param_bytes == 29_404_160 * 2


@pytest.mark.parametrize("size", [1000 * MiB, 1100 * MiB])
def test_probe_rounding_around_a_power_of_two(size: int) -> None:
    model = size_for_payload(ModelConfig(), size)
    n = probe_payload(model)
    block = GiB if n <= GiB else 2 * GiB
    assert project_probe(model, "lazy") == block
    pageable = page_rounded(n)  # the .cpu() temporary: whole pages
    assert project_probe(model, "naive", cycles=1) == pageable + block
    assert project_probe(model, "naive", cycles=3) == 2 * block + pageable
    assert project_probe(model, "registered") == project_probe(model, "pageable")


def test_emulated_model() -> None:
    # CPU emulation: .cpu() and .pin_memory() are two clones; nothing rounds to powers of two
    n = 64 * MiB
    assert emulated_host("naive", [n], cycles=1).peak == 2 * n
    assert emulated_host("naive", [n], cycles=3).peak == 3 * n
    assert emulated_host("naive", [n], cycles=3).steady == n
    for strategy in ("lazy", "registered", "pageable"):
        assert emulated_host(strategy, [n], cycles=3).peak == n
    # two buffers: the first one's copy is held while the second is cloned twice; the
    # device bytes the offload frees are not host memory and never offset host bytes
    two = emulated_host("naive", [n, n], cycles=1)
    assert two.peak == 3 * n


def test_probe_projection_matches_the_h200_measurement() -> None:
    # benchmarks/results: offloadprobe run on one H200, 5 GiB payload, 3 cycles
    doc = json.loads((ROOT / "benchmarks/results/h200-2026-11-29-compare-default.json").read_text())
    model = ModelConfig(**doc["model"])
    assert probe_payload(model) == doc["payload_bytes"]
    for run in doc["runs"]:
        predicted = project_probe(model, run["strategy"], cycles=doc["settings"]["cycles"])
        measured = run["summary"]["host_peak_bytes"]
        assert abs(measured - predicted) / predicted < 0.01, run["strategy"]
