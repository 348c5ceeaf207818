"""Repro scaling arithmetic and the phase-log gate, without running a model."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from offloadprobe.core.config import ModelConfig, size_for_payload
from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import HostReading, PhaseRecord, RunRecord
from offloadprobe.measure.cgroup import CgroupUnavailable, create_group
from offloadprobe.measure.phase_log import PhaseLog, last_started
from offloadprobe.repro.children import GateKeeper
from offloadprobe.repro.host import over_limit
from offloadprobe.repro.reproduce import probe_model, selected
from offloadprobe.repro.scaling import gpu_scaling, host_scaling
from offloadprobe.scenarios import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
MiB, GiB = 2**20, 2**30


def test_ci_small_scales_by_one() -> None:
    s = load_scenario(SCENARIOS / "ci-small.toml")
    scaling = host_scaling(s, probe_model(s))
    assert scaling.scale.factor == 1
    assert scaling.limit == 88 * MiB


def test_verl_6193_per_rank_budget() -> None:
    s = load_scenario(SCENARIOS / "verl-6193-pinned-peak.toml")
    scaling = host_scaling(s, probe_model(s))
    terms = {t.label: t.value for t in scaling.terms}
    # (1700 - 1100 reserved - 8 x 41.73 optimizer) / 8 ranks
    assert round(terms["node budget for parameter copies"] / GiB, 2) == 266.15
    assert round(scaling.rank_budget / GiB, 2) == 33.27
    assert scaling.scale.rank_payload == s.layout().stages[3].param_bytes
    # the limit keeps the rank's ratio: 33.27 GiB of budget over 13.91 GiB of parameters
    assert round(scaling.limit / scaling.scale.probe_payload, 2) == 2.39
    # the scaled limit separates the scaled naive (3 payloads from cycle 1, CPU emulation)
    # from lazy (1 payload), as naive 46.5 GiB and lazy 16.5 GiB straddle 33.27 GiB
    n = scaling.scale.probe_payload
    assert n < scaling.limit < 3 * n


def test_verl_6635_gpu_headroom() -> None:
    s = load_scenario(SCENARIOS / "verl-6635-master-param.toml")
    scaling = gpu_scaling(s, probe_model(s))
    # 81559 MiB - 73.7 GiB = 5.95 GiB of headroom on the H100, scaled by the 64 MiB probe
    # over the 9.62 GiB rank payload (1/154): 39.5 MiB
    assert round(scaling.headroom / MiB, 1) == 39.5
    assert scaling.claim + scaling.headroom == scaling.limit
    # legacy leaves the fp32 master (2 payloads) on the device; the headroom is far less
    assert 2 * scaling.scale.probe_payload > 3 * scaling.headroom


def test_host_scaling_needs_a_host_limit() -> None:
    s = load_scenario(SCENARIOS / "verl-6635-master-param.toml")
    model = size_for_payload(ModelConfig(), 64 * MiB)
    with pytest.raises(UsageError, match="gpu_memory_per_device"):
        gpu_scaling(load_scenario(SCENARIOS / "ci-small.toml"), model)
    assert host_scaling(s, model).limit > 0


def test_only_names_an_expected_strategy() -> None:
    s = load_scenario(SCENARIOS / "ci-small.toml")
    assert [e.strategy for e in selected(s, ["lazy"])] == ["lazy"]
    with pytest.raises(UsageError, match="expects nothing of it; choose from naive, lazy"):
        selected(s, ["legacy"])


def test_gate_pauses_at_every_offload_and_after_every_load(tmp_path: Path) -> None:
    # GIVEN a gated phase log and a keeper WHEN a child runs two cycles THEN each offload
    # start and each load end waits for the keeper, in order
    gate = tmp_path / "gate"
    gate.mkdir()
    seen: list[tuple[str, int, str]] = []
    keeper = GateKeeper(gate, lambda e: seen.append((e["event"], e["cycle"], e["phase"])))
    keeper.start()
    log = PhaseLog(tmp_path / "phases.jsonl", gate=gate)

    def child() -> None:
        for cycle in range(2):
            for phase in ("train", "offload", "load"):
                log.start(cycle, phase)
                log.end(cycle, phase)

    worker = threading.Thread(target=child)
    worker.start()
    worker.join(timeout=120)  # returns as soon as the child is done; generous under load
    keeper.stop()
    assert not worker.is_alive()
    assert seen == [
        ("start", 0, "offload"),
        ("end", 0, "load"),
        ("start", 1, "offload"),
        ("end", 1, "load"),
    ]
    assert last_started(tmp_path / "phases.jsonl") is None


def test_no_cgroup_without_a_memory_hierarchy(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    with pytest.raises(CgroupUnavailable, match="memory controller is not available"):
        create_group("x", proc_cgroup=proc, root=tmp_path / "sys")


def _phase(cycle: int, phase: str, peak: int) -> PhaseRecord:
    host = HostReading(rss_before=0, rss_after=0, peak=peak, shmem_after=0, method="vmhwm")
    return PhaseRecord(
        cycle=cycle,
        phase=phase,
        seconds=0.1,
        bytes_moved=0,
        gbps=None,
        host=host,
        pinned=None,
        gpu=None,
        cgroup=None,
    )


def test_without_a_cgroup_the_first_phase_over_the_limit_is_named() -> None:
    # GIVEN exact per-phase peaks over a 100 MiB baseline WHEN judged against a limit
    # THEN the first offload/load phase above it is where the kill would have come
    phases = [
        _phase(0, "train", 500 * MiB),  # the framework's, never judged
        _phase(0, "offload", 180 * MiB),
        _phase(0, "load", 150 * MiB),
        _phase(1, "offload", 220 * MiB),
    ]
    run = RunRecord(
        strategy="naive",
        description="",
        payload_bytes=56 * MiB,
        grad_bytes=0,
        baseline_host_bytes=100 * MiB,
        gpu_baseline_bytes=None,
        phases=phases,
        summary=None,
    )
    assert over_limit(run, 130 * MiB) is None
    assert over_limit(run, 70 * MiB) == (0, "offload", 80 * MiB)
    assert over_limit(run, 85 * MiB) == (1, "offload", 120 * MiB)


def test_calibration_takes_the_rank_that_keeps_the_most(monkeypatch, tmp_path: Path) -> None:
    # GIVEN a calibration over two ranks where rank 1 (a later pipeline stage, say) keeps
    # 3 MiB on its device after offloading everything and rank 0 keeps 1 MiB
    from dataclasses import replace

    from offloadprobe.core.config import RunConfig
    from offloadprobe.core.job import WorkerResult
    from offloadprobe.core.records import WorldRun
    from offloadprobe.repro.gpu import calibrate
    from tests.fakes import fake_report, fake_run, install_child

    ranks = [fake_run(left_on_device={"param_data": 0, "exp_avg": n * MiB}) for n in (1, 3)]
    world = WorldRun(world_size=2, nnodes=1, layout={"pp": 2}, ranks=ranks, nodes=[])
    report = fake_report(replace(ranks[0], world=world)).to_dict()
    asked = []

    def child(job, spec):
        asked.append(job)
        WorkerResult(exit_code=0, report=report).write(job.result_path(None))
        return 0, ""

    install_child(monkeypatch, child)
    s = load_scenario(SCENARIOS / "verl-6635-master-param.toml")
    scaling = gpu_scaling(s, probe_model(s))
    # WHEN it calibrates THEN the residue is the largest rank's, and the claim leaves room for it
    settings, why = calibrate(RunConfig(model=probe_model(s)), scaling, tmp_path, None, ranks=2)
    assert why == "" and settings is not None
    assert settings.residue == 3 * MiB
    assert settings.claim == settings.limit - 3 * MiB - scaling.headroom
    assert asked[0].launch.nproc_per_node == 2
