"""GPU-limit reproduction: optimizer strategies under ``--gpu-limit`` and ``--rollout-claim``.

Each optimizer strategy runs in a fresh ``offloadprobe run`` child (model strategy
``lazy``, the scenario's optimizer settings). Between offload and load a rollout phase
claims device memory; a strategy that left too much behind makes the claim fail with
PyTorch's CUDA OOM (in CPU emulation the claim is judged against the emulated device
bytes still resident, and says so).

What the probe keeps on its device besides optimizer state (CUDA context aside: the
caching allocator's own blocks, the batch, small scalars) is measured by a calibration
child that offloads everything (optimizer strategy ``complete``, one cycle): its
``residue`` after offload, of the rank that keeps the most when it runs several. Then::

    gpu limit = max(scaled GPU limit, calibration's reserved peak)
    claim     = gpu limit - residue - scaled headroom

so a strategy fits exactly when what it leaves on the device beyond the residue is at
most the scaled headroom. The limit is raised to the calibration's peak where the probe
(dp = 1: its optimizer state is not sharded) would not even train within the scaled one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from offloadprobe.core.config import OptimizerChoice, RunConfig
from offloadprobe.core.records import RunRecord
from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term
from offloadprobe.measure.summary import OFFLOADS
from offloadprobe.plan.projection import PAIRED_MODEL_STRATEGY, PAIRED_OPTIMIZER_STRATEGY
from offloadprobe.repro.children import Child, run_child
from offloadprobe.repro.records import ReproOutcome
from offloadprobe.repro.scaling import GpuScaling
from offloadprobe.scenarios.schema import Scenario

STATE_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "uint8"}
"""Scenario dtype names -> ``OptimizerChoice`` names (uint8 holds FP8 E4M3 + a scale)."""


def optimizer_choice(s: Scenario) -> OptimizerChoice:
    """The scenario's optimizer settings as the children's optimizer choice."""
    opt = s.offload.optimizer_options
    if not opt.precision_aware:
        return OptimizerChoice()
    return OptimizerChoice(
        precision_aware=True,
        exp_avg_dtype=STATE_DTYPE_NAMES.get(opt.exp_avg_dtype, opt.exp_avg_dtype),
        exp_avg_sq_dtype=STATE_DTYPE_NAMES.get(opt.exp_avg_sq_dtype, opt.exp_avg_sq_dtype),
        store_param_remainders=opt.store_param_remainders,
    )


def residue(run: RunRecord) -> int:
    """Device bytes the run still held after its last offload (emulated ones in emulation)."""
    offloads = [p for p in run.phases if p.phase in OFFLOADS]
    last = offloads[-1]  # parameters and optimizer state move as separate phases
    if last.gpu is not None:
        return last.gpu.allocated_after
    return sum((last.left_on_device or {}).values())


def _child(config: RunConfig, *, device: str, timeout_s: float | None, ranks: int) -> Child:
    """One child, or ``ranks`` of them through torchrun's launcher in a node cgroup."""
    return run_child(config, device=device, timeout_s=timeout_s, nproc_per_node=ranks)


def rank_runs(run: RunRecord) -> list[RunRecord]:
    """Every rank's record of a run over several ranks (rank 0's report carries them all),
    or the run itself."""
    if run.world is not None:
        found = [r for r in run.world.ranks if r.phases]
        if found:
            return found
    return [run]


def reserved_peak(run: RunRecord) -> int:
    """The caching allocator's highest reserved bytes in any phase (0 in emulation)."""
    return max((p.gpu.reserved_peak for p in run.phases if p.gpu is not None), default=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSettings:
    """The ``--gpu-limit`` and ``--rollout-claim`` every optimizer child gets."""

    limit: int
    claim: int
    residue: int
    terms: tuple[Term, ...]


def calibrate(
    config: RunConfig,
    scaling: GpuScaling,
    workdir: Path,
    timeout_s: float | None,
    floor: int = 0,
    ranks: int = 1,
    device: str = "cpu",
) -> tuple[GpuSettings | None, str]:
    """Run the calibration child; the settings, or None and why not."""
    calibration = replace(
        config,
        strategy=PAIRED_MODEL_STRATEGY,
        optimizer_strategy=PAIRED_OPTIMIZER_STRATEGY,
        cycles=1,
    )
    outcome = _child(calibration, device=device, timeout_s=timeout_s, ranks=ranks)
    run = outcome.run
    if outcome.exit_code != 0 or run is None or not run.phases:
        return None, f"calibration run failed: {outcome.verdict}"
    ranks = rank_runs(run)  # every rank: a pipeline stage or an expert shard may hold more
    left, peak = max(residue(r) for r in ranks), max(reserved_peak(r) for r in ranks)
    limit = max(scaling.limit, peak, floor)
    claim = limit - left - scaling.headroom
    terms = (
        Term(
            label="calibration residue",
            formula="device bytes after offloading everything (complete), largest rank",
            value=left,
        ),
        Term(
            label="calibration reserved peak",
            formula="max reserved bytes in any phase and rank (0 in emulation)",
            value=peak,
        ),
        Term(
            label="--gpu-limit",
            formula="max(scaled GPU limit, reserved peak, --gpu-limit-floor)",
            value=limit,
        ),
        Term(label="--rollout-claim", formula="gpu limit - residue - scaled headroom", value=claim),
    )
    if claim <= 0:
        return None, f"no room for a rollout claim: {format_bytes(claim)}"
    return GpuSettings(limit=limit, claim=claim, residue=left, terms=terms), ""


def run_gpu_job(
    strategy: str,
    expected: str,
    config: RunConfig,
    settings: GpuSettings,
    workdir: Path,
    *,
    emulated: bool,
    timeout_s: float | None,
    ranks: int = 1,
    device: str = "cpu",
) -> ReproOutcome:
    """Run one optimizer strategy under the settings and classify what happened."""
    job = replace(
        config,
        strategy=PAIRED_MODEL_STRATEGY,
        optimizer_strategy=strategy,
        gpu_limit_bytes=settings.limit,
        rollout_claim_bytes=settings.claim,
    )
    outcome = _child(job, device=device, timeout_s=timeout_s, ranks=ranks)
    method = (
        "rollout claim judged in CPU emulation against the emulated device bytes"
        if emulated
        else "real CUDA OOM under --gpu-limit (torch.cuda.set_per_process_memory_fraction)"
    )
    base = dict(
        strategy=strategy,
        kind="optimizer",
        expected=expected,
        method=method,
        exit_code=outcome.exit_code,
        child_verdict=outcome.verdict,
        stderr_tail=outcome.stderr_tail,
    )
    run = outcome.run
    failure = run.failure if run is not None else None
    if failure is not None and failure.kind == "out of memory" and failure.phase:
        cycle, phase = failure.cycle, failure.phase
        if phase != "rollout":
            return ReproOutcome(
                observed="error",
                detail=f"device out of memory in cycle {cycle}, phase {phase}, not in the "
                "rollout: the scaled limit is too small for the probe itself",
                cycle=cycle,
                phase=phase,
                **base,
            )
        why = failure.message
        return ReproOutcome(
            observed="oom",
            detail=f"OOM reproduced: device out of memory at cycle {cycle}, phase rollout ({why})",
            cycle=cycle,
            phase=phase,
            **base,
        )
    if outcome.exit_code != 0 or run is None or run.summary is None:
        cycle, phase = outcome.killed_at
        where = f" at cycle {cycle}, phase {phase}" if phase else ""
        return ReproOutcome(observed="error", detail=f"{outcome.verdict}{where}", **base)
    left = residue(run)
    margin = settings.limit - settings.claim - left
    terms = (
        Term(label="left on the device after offload", formula="this run's residue", value=left),
        Term(label="margin", formula="gpu limit - claim - residue", value=margin),
    )
    return ReproOutcome(
        observed="ok",
        detail=f"within limit, margin {format_bytes(margin)}",
        margin=margin,
        terms=terms,
        **base,
    )
