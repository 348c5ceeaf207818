"""Hand-built records for the reporters' golden tests: no torch, no model, exact numbers."""

from __future__ import annotations

from dataclasses import replace

from offloadprobe.compare.comparison import Candidate, Comparison, ComparisonRow
from offloadprobe.core.outcomes import Failure, Verdict
from offloadprobe.core.records import (
    GpuReading,
    HostReading,
    PartSummary,
    PhaseRecord,
    PinnedReading,
    Report,
    ResidencyFact,
    RunRecord,
    RunSummary,
)
from offloadprobe.core.verdicts import OK
from offloadprobe.layout.terms import Term
from offloadprobe.plan.measured import MeasuredRow, measured_row
from offloadprobe.plan.projection import RankHost
from offloadprobe.plan.scenario_plan import ScenarioPlan, StrategyPlan
from offloadprobe.repro.records import Repro, ReproOutcome

MiB = 1024**2
GiB = 1024**3
BASE = 500 * MiB
VERSIONS = {"torch": "2.13.0+cpu", "megatron_core": "0.16.1", "cuda": None, "python": "3.11.7"}
EMULATION = (
    "CPU emulation: no pinned memory, no GPU readings; emulated device memory is a "
    "constant part of RSS (device storages + ballast), taken out of every host figure"
)


def host(peak: int, after: int, *, method: str = "vmhwm") -> HostReading:
    """A host reading ``peak``/``after`` bytes over the baseline, no emulated device bytes."""
    return HostReading(
        rss_before=BASE, rss_after=BASE + after, peak=BASE + peak, shmem_after=0, method=method
    )


def phase(cycle: int, name: str, peak: int, after: int, *, payload: int, **extra) -> PhaseRecord:
    moving = name != "train"
    seconds = 0.05 if moving else 1.5
    return PhaseRecord(
        cycle=cycle,
        phase=name,
        seconds=seconds,
        bytes_moved=payload if moving else 0,
        gbps=payload / seconds / 1e9 if moving else None,
        host=host(peak, after),
        pinned=extra.pop("pinned", None),
        gpu=extra.pop("gpu", None),
        cgroup=None,
        **extra,
    )


def cpu_run(
    strategy: str = "lazy", optimizer_strategy: str = "none", *, integrity: bool = True
) -> RunRecord:
    """Two cycles in CPU emulation; the optimizer state stays where it is."""
    payload = 128 * MiB
    left = {"exp_avg": 256 * MiB, "exp_avg_sq": 256 * MiB} if optimizer_strategy == "none" else {}
    phases = []
    for c in range(2):
        phases.append(phase(c, "train", int(3.8 * payload), payload if c else 0, payload=payload))
        phases.append(
            phase(c, "offload", payload, payload, payload=payload, left_on_device=dict(left))
        )
        phases.append(phase(c, "load", payload + MiB, payload, payload=payload))
    return RunRecord(
        strategy=strategy,
        description="one pinned host buffer per DDP buffer, reused (the fix)",
        payload_bytes=payload,
        grad_bytes=2 * payload,
        baseline_host_bytes=BASE,
        gpu_baseline_bytes=None,
        phases=phases,
        summary=RunSummary(
            host_peak_bytes=payload + MiB,
            host_peak_x=(payload + MiB) / payload,
            steady_host_bytes=payload,
            steady_host_x=1.0,
            held_while_training_bytes=payload,
            held_while_training_x=1.0,
            pinned_reserved_bytes=None,
            gpu_left_after_offload_bytes=None,
            offload_gbps=2.7,
            load_gbps=0.8,
            first_offload_gbps=1.1,
            first_load_gbps=0.7,
            integrity_ok=integrity,
            left_after_offload_bytes_by_key=left,
            optimizer_state_bytes=512 * MiB,
            steady_host_x_optimizer_state=payload / (512 * MiB),
        ),
        integrity=[] if integrity else ["param_data bf16 buffer 0: fingerprint differs"],
        notes=[EMULATION, "optimizer: torch.optim.adamw.AdamW"],
        optimizer_strategy=optimizer_strategy,
        optimizer="torch.optim.adamw.AdamW",
    )


def stopped_run() -> RunRecord:
    """Out of device memory in the first load: phases so far, no summary."""
    run = cpu_run("naive")
    return replace(
        run,
        phases=run.phases[:2],
        summary=None,
        failure=Failure(
            kind="out of memory",
            message="CUDA out of memory claiming 1.38 GiB",
            cycle=0,
            phase="load",
        ),
    )


def not_offloaded_run() -> RunRecord:
    """A strategy that copied the parameters to the host yet kept them on the device."""
    run = cpu_run("keeps")
    left = {"param_data": 128 * MiB, "exp_avg": 256 * MiB, "exp_avg_sq": 256 * MiB}
    summary = replace(run.summary, left_after_offload_bytes_by_key=left)
    return replace(
        run,
        summary=summary,
        residency=[
            ResidencyFact(
                cycle=c,
                param_bytes_to_move=128 * MiB,
                param_bytes_left=128 * MiB,
                param_offload_gave_bytes=0,
                built_on_device_bytes=0,
                moves_optimizer=False,
                optimizer_state_bytes=512 * MiB,
                optimizer_moved_bytes=0,
                left_by_owner=left,
            )
            for c in range(2)
        ],
    )


def gpu_run() -> RunRecord:
    """registered + legacy on a GPU, precision-aware: master_param stays behind."""
    payload = GiB
    left = {"master_param": 2 * GiB}
    pinned = PinnedReading(
        reserved_after=0, in_use_after=0, reserved_peak=0, key_schema="allocated_bytes"
    )

    def gpu(after: int) -> GpuReading:
        return GpuReading(
            allocated_before=after,
            allocated_after=after,
            allocated_peak=after + GiB,
            reserved_after=after,
            reserved_peak=after + GiB,
            device_used_after=after + 600 * MiB,
        )

    phases = []
    for c in range(2):
        phases.append(phase(c, "train", 0, 0, payload=payload, pinned=pinned, gpu=gpu(9 * GiB)))
        phases.append(
            phase(
                c,
                "offload",
                int(7.52 * payload),
                7 * payload,
                payload=payload,
                pinned=pinned,
                gpu=gpu(2 * GiB),
                left_on_device=dict(left),
            )
        )
        phases.append(
            phase(
                c,
                "load",
                7 * payload,
                7 * payload,
                payload=payload,
                pinned=pinned,
                gpu=gpu(9 * GiB),
            )
        )
    return RunRecord(
        strategy="registered",
        description="exact-size host buffer page-locked with cudaHostRegister",
        payload_bytes=payload,
        grad_bytes=2 * payload,
        baseline_host_bytes=BASE,
        gpu_baseline_bytes=0,
        phases=phases,
        summary=RunSummary(
            host_peak_bytes=int(7.52 * payload),
            host_peak_x=7.52,
            steady_host_bytes=7 * payload,
            steady_host_x=7.0,
            pinned_reserved_bytes=payload,
            gpu_left_after_offload_bytes=2 * GiB + 23 * 1024,
            offload_gbps=55.3,
            load_gbps=53.7,
            first_offload_gbps=3.4,
            first_load_gbps=53.9,
            integrity_ok=True,
            left_after_offload_bytes_by_key=left,
            optimizer_state_bytes=6 * GiB,
            steady_host_x_optimizer_state=7 / 6,
        ),
        notes=["optimizer: offloadprobe PrecisionAwareAdam"],
        optimizer_strategy="legacy",
        optimizer="offloadprobe PrecisionAwareAdam",
    )


def part(moved: int, peak_x: float, steady_x: float, rate: float) -> PartSummary:
    return PartSummary(
        moved_bytes=moved,
        host_peak_bytes=int(peak_x * moved),
        host_peak_x=peak_x,
        steady_host_bytes=int(steady_x * moved),
        steady_host_x=steady_x,
        offload_gbps=rate,
        load_gbps=rate - 1,
    )


def with_parts(
    run: RunRecord, params: PartSummary | None, optimizer: PartSummary | None
) -> RunRecord:
    """``run`` whose summary also carries each part measured in a phase of its own."""
    moved = sum(p.moved_bytes for p in (params, optimizer) if p is not None)
    summary = replace(run.summary, params=params, optimizer=optimizer, moved_bytes=moved)
    return replace(run, summary=summary)


def parts_run() -> RunRecord:
    """lazy + complete on a GPU, each part over its own bytes."""
    run = replace(gpu_run(), strategy="lazy", optimizer_strategy="complete")
    phases = [p if p.left_on_device is None else replace(p, left_on_device={}) for p in run.phases]
    summary = replace(
        run.summary,
        left_after_offload_bytes_by_key={},
        host_peak_x=run.summary.host_peak_bytes / (7 * GiB),
        steady_host_x=run.summary.steady_host_bytes / (7 * GiB),
        gpu_left_after_offload_bytes=23 * 1024,
    )
    run = replace(run, phases=phases, summary=summary)
    return with_parts(run, part(GiB, 1.6, 1.6, 55.1), part(6 * GiB, 1.0, 1.0, 50.2))


def parts_comparison() -> Comparison:
    """lazy + complete against naive + legacy, part by part."""
    rows = []
    for name, opt, params_x, opt_x in (
        ("naive", "legacy", 4.2, 1.63),
        ("lazy", "complete", 1.6, 1.0),
    ):
        run = replace(parts_run(), strategy=name, optimizer_strategy=opt)
        run = with_parts(
            run, part(GiB, params_x, params_x, 55.0), part(6 * GiB, opt_x, opt_x, 50.0)
        )
        candidate = Candidate(strategy=name, optimizer_strategy=opt)
        rows.append(ComparisonRow(candidate=candidate, run=run, verdict=OK, worker_exit_code=0))
    return Comparison(rows=rows, baseline=rows[0].candidate.label)


def report(run: RunRecord, *, emulated: bool) -> Report:
    return Report(
        device="cpu" if emulated else "cuda:0 (NVIDIA H200)",
        emulated=emulated,
        emulation_note=EMULATION if emulated else None,
        payload_bytes=run.payload_bytes,
        versions=VERSIONS if emulated else {**VERSIONS, "torch": "2.11.0+cu130", "cuda": "13.0"},
        machine={"hostname": "fake", "cpus": 2},
        model={"num_layers": 2},
        settings={"strategy": run.strategy, "optimizer_strategy": run.optimizer_strategy},
        runs=[run],
    )


def _summary(peak_x: float, steady_x: float, payload: int, **rates) -> RunSummary:
    return RunSummary(
        host_peak_bytes=int(peak_x * payload),
        host_peak_x=peak_x,
        steady_host_bytes=int(steady_x * payload),
        steady_host_x=steady_x,
        pinned_reserved_bytes=int(steady_x * payload),
        gpu_left_after_offload_bytes=int(30.06 * GiB),
        offload_gbps=rates.get("offload", 55.1),
        load_gbps=53.8,
        first_offload_gbps=rates.get("first", 1.6),
        first_load_gbps=53.7,
        integrity_ok=rates.get("integrity", True),
        held_while_training_bytes=int(steady_x * payload),
        held_while_training_x=steady_x,
    )


def comparison() -> Comparison:
    """Four children at 5 GiB: one over budget, one killed, one corrupted, one ok."""
    payload = 5 * GiB
    rows = []
    specs = [
        (
            "naive",
            Verdict(kind="over budget", detail="host peak 4.20x > 1.70x"),
            1,
            _summary(4.2, 3.2, payload),
        ),
        ("lazy", Verdict(kind="ok"), 0, _summary(1.6, 1.6, payload)),
        (
            "registered",
            Verdict(kind="killed", detail="SIGKILL, cgroup OOM (oom_kill 0 -> 1)"),
            -9,
            None,
        ),
        (
            "pageable",
            Verdict(kind="corrupted", detail="cycle 0, buffer 0: param_data differs"),
            1,
            _summary(1.0, 1.0, payload, offload=13.6, integrity=False),
        ),
    ]
    for name, verdict, code, summary in specs:
        run = None
        if summary is not None:
            run = RunRecord(
                strategy=name,
                description=name,
                payload_bytes=payload,
                grad_bytes=2 * payload,
                baseline_host_bytes=BASE,
                gpu_baseline_bytes=0,
                phases=[],
                summary=summary,
                optimizer_strategy="none",
            )
        candidate = Candidate(strategy=name)
        if name == "registered":  # the longest label a row can have
            candidate = Candidate(
                strategy=name,
                optimizer_strategy="complete",
                alloc_conf="pinned_use_cuda_host_register:True",
            )
        rows.append(
            ComparisonRow(candidate=candidate, run=run, verdict=verdict, worker_exit_code=code)
        )
    return Comparison(rows=rows, baseline=rows[0].candidate.label)


PIN = 16 * GiB


def cpu_comparison() -> Comparison:
    """naive and lazy in CPU emulation: nothing pinned, no GPU readings to show."""
    rows = []
    for name, peak_x in (("naive", 3.0), ("lazy", 1.01)):
        run = cpu_run(name)
        summary = replace(
            run.summary,
            host_peak_x=peak_x,
            host_peak_bytes=int(peak_x * run.payload_bytes),
        )
        run = replace(run, summary=summary)
        candidate = Candidate(strategy=name)
        rows.append(ComparisonRow(candidate=candidate, run=run, verdict=OK, worker_exit_code=0))
    return Comparison(rows=rows, baseline=rows[0].candidate.label)


def scenario_plan() -> ScenarioPlan:
    def params(name: str, peak: int, node: int, outcome: str, expected: str | None):
        return StrategyPlan(
            strategy=name,
            kind="params",
            per_rank={
                "host peak": peak,
                "steady host": peak,
                "pinned": peak,
                "optimizer on host": 41 * GiB,
            },
            host_per_node=node,
            host_limit=1700 * GiB,
            gpu_per_device=None,
            gpu_limit=None,
            outcome=outcome,
            expected=expected,
            terms=(
                Term(label="pinned block", formula="PowerOf2Ceil(14495514624)", value=16 * GiB),
            ),
        )

    def optimizer(name: str, left: int, outcome: str, expected: str | None):
        return StrategyPlan(
            strategy=name,
            kind="optimizer",
            per_rank={"GPU left after offload": left, "optimizer on host": 55 * GiB},
            host_per_node=1677 * GiB,
            host_limit=1700 * GiB,
            gpu_per_device=left + GiB,
            gpu_limit=80 * GiB,
            outcome=outcome,
            expected=expected,
            terms=(),
        )

    return ScenarioPlan(
        scenario="verl-6193",
        path="verl-6193-pinned-peak.toml",
        model="Qwen3-235B-A22B",
        parallelism={"tp": 4, "pp": 8, "ep": 4, "dp": 2},
        cycles=3,
        stages=[
            {"pp_rank": 0, "layers": 11, "param_bytes": 13 * GiB, "grad_bytes": 26 * GiB},
            {"pp_rank": 1, "layers": 12, "param_bytes": 14 * GiB, "grad_bytes": 28 * GiB},
        ],
        layout_terms=(
            Term(
                label="layers on this stage", formula="first=11, last=11", value=12, unit="layers"
            ),
            Term(label="param_data", formula="padded elements x 2 B", value=14 * GiB),
        ),
        strategies=[
            params("naive", 46 * GiB, 1805 * GiB, "oom", "oom"),
            params("lazy", 16 * GiB, 1565 * GiB, "ok", "ok"),
            params("registered", 14 * GiB, 1545 * GiB, "ok", "oom"),
            optimizer("legacy", 2 * GiB, "ok", None),
            optimizer("none", 82 * GiB, "oom", "ok"),
        ],
        notes=["host peaks replay 3 offload cycles through the pinned allocator model"],
    )


def probe_rows() -> list[RankHost]:
    term = Term(label="pinned block", formula="PowerOf2Ceil(1048576000)", value=GiB)
    return [
        RankHost(
            strategy="naive", pp_rank=0, peak=3 * GiB, steady=2 * GiB, pinned=2 * GiB, terms=(term,)
        ),
        RankHost(strategy="lazy", pp_rank=0, peak=GiB, steady=GiB, pinned=GiB, terms=(term,)),
    ]


def measured_rows() -> list[MeasuredRow]:
    """``plan --probe --strategy``'s rows from two fake runs: one ok at 2x, one crashed."""
    from tests.fakes import fake_run

    spec = "mypkg.offload:offload_megatron_model_to_cpu,load_megatron_model_to_gpu"
    crash = Verdict(kind="crashed", detail="RuntimeError: boom", cycle=0, phase="offload")
    return [
        measured_row(
            name="mine",
            spec=spec,
            device="cpu",
            run=fake_run(spec, cycles=1, host_peak_x=2.0),
            verdict=OK,
        ),
        measured_row(
            name=None,
            spec="mypkg.broken:Offload",
            device="cpu",
            run=fake_run("mypkg.broken:Offload", cycles=1, failure="boom", failure_kind="crashed"),
            verdict=crash,
        ),
    ]


CGROUP = "cgroup v2 memory.max"


def repro() -> Repro:
    term = Term(label="scaled limit", formula="usage + budget x scale", value=600 * MiB)
    return Repro(
        scenario="ci-small",
        path="ci-small.toml",
        device="cpu",
        emulated=True,
        model={"num_layers": 2, "hidden_size": 512, "num_attention_heads": 16, "vocab_size": 15360},
        scale="scale = 48.00 MiB / 1.00 GiB = 0.0469",
        warnings=[
            "registered is expected ok, and its scaled run is projected oom here: host peak "
            "610.00 MiB, over the scaled limit 600.00 MiB; no [repro] payload from 8.00 MiB to "
            "128.00 MiB is projected to reproduce every outcome on this device"
        ],
        host_terms=(term,),
        outcomes=[
            ReproOutcome(
                strategy="naive",
                kind="params",
                expected="oom",
                observed="oom",
                detail="OOM reproduced: killed at cycle 0, phase offload (cgroup oom_kill 0 -> 1)",
                method="cgroup v2 memory.max",
            ),
            ReproOutcome(
                strategy="lazy",
                kind="params",
                expected="ok",
                observed="ok",
                detail="within limit, margin 31.66 MiB",
                method="cgroup v2 memory.max",
                margin=int(31.66 * MiB),
            ),
            ReproOutcome(
                strategy="registered",
                kind="params",
                expected="ok",
                observed="oom",
                detail="OOM: killed at cycle 1, phase load",
                method="cgroup v2 memory.max",
            ),
        ],
        notes=["CPU emulation: nothing is pinned"],
    )


def rank_run(rank: int, node: int, *, peak: int, world_size: int = 2) -> RunRecord:
    """One rank's two-cycle CPU run whose offloads peak ``peak`` bytes over its baseline."""
    from offloadprobe.core.world_records import RankPlace

    base = cpu_run()
    phases = [
        replace(p, host=host(peak, p.host.rss_after - BASE)) if p.phase == "offload" else p
        for p in base.phases
    ]
    summary = replace(
        base.summary,
        host_peak_bytes=peak,
        host_peak_x=peak / base.payload_bytes,
        moved_bytes=base.payload_bytes,
    )
    place = RankPlace(
        rank=rank, local_rank=rank % 2, node_rank=node, world_size=world_size, hostname="vm"
    )
    return replace(base, phases=phases, summary=summary, place=place)


def node_readings(node_peak: int, *, local: bool = True) -> list:
    """The node cgroup around each phase of ``rank_run``: offloads peak ``node_peak`` over
    the node's usage before the first offload (``2 * BASE``)."""
    from offloadprobe.measure.node import NodeReading

    out = []
    for c in range(2):
        for name in ("train", "offload", "load"):
            before = 2 * BASE + (2 * 128 * MiB if c else 0)
            peak = 2 * BASE + node_peak if name == "offload" else before + MiB
            out.append(
                NodeReading(
                    cycle=c,
                    phase=name,
                    usage_before=2 * BASE,
                    peak=peak,
                    usage_after=2 * BASE + 2 * 128 * MiB,
                    peak_is_phase_local=local,
                )
            )
    return out


def world_run() -> RunRecord:
    """Two ranks on one node: naive-like offload peaks of 2x each, 3x at the node."""
    from offloadprobe.core.records import WorldRun
    from offloadprobe.measure.node import NodeSource, node_records

    ranks = [rank_run(0, 0, peak=256 * MiB), rank_run(1, 0, peak=260 * MiB)]
    source = NodeSource(
        node_rank=0,
        hostname="vm",
        cgroup="cgroup v1 /sys/fs/cgroup/memory/op-node",
        cgroup_missing=None,
        readings=node_readings(384 * MiB),
    )
    layout = {"tp": 1, "pp": 1, "ep": 1, "cp": 1, "vpp": None, "dp": 2}
    world = WorldRun(
        world_size=2,
        nnodes=1,
        layout=layout,
        ranks=ranks,
        nodes=node_records(ranks, [source]),
        notes=["phases aligned across ranks"],
    )
    return replace(ranks[0], world=world)
