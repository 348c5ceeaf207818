"""A finished run's record and report: what the cycles measured, with its environment."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from offloadprobe.core import environment
from offloadprobe.core.config import RunConfig
from offloadprobe.core.host_zero import counted_growth
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import Report, RunRecord
from offloadprobe.core.units import format_bytes
from offloadprobe.engine.descriptors import notes_of
from offloadprobe.engine.engine_state import inventory_of, part_bytes
from offloadprobe.measure.summary import LOADS, OFFLOADS, summarise


def record_of(state: Any, runtime: Any) -> RunRecord:
    """The ``RunRecord`` of a run's state once its cycles ended (``engine.runner._Cycles``)."""
    cfg, phases = state.cfg, state.phases
    offloads = [p for p in phases if p.phase in OFFLOADS]
    held = construction_held(state.construction)
    growth = pre_offload_growth(phases)
    measured = state.no_strategy.growth
    framework = sum(measured) if measured else None
    counted = counted_growth(growth, framework) if growth is not None else 0
    baseline = offloads[0].host.host_rss_before - held - counted if offloads else 0
    summary = None
    moved_parts = (
        sum(part_bytes(inventory_of(state.model)).values()) if state.info.moves_params else 0
    )
    if offloads and any(p.phase in LOADS for p in phases):
        summary = summarise(
            phases,
            payload_bytes=state.payload,
            baseline_host_bytes=baseline,
            gpu_baseline_bytes=state.gpu_baseline,
            registered_bytes=state.registered,
            integrity_ok=not state.problems,
            optimizer_state_bytes=state.optimizer_bytes,
            param_bytes_to_move=state.param_to_move + moved_parts,
            optimizer_bytes_to_move=state.optimizer_moved if state.moves_optimizer else 0,
        )
    notes = [runtime.note] if runtime.note else []
    notes += state.notes
    for strategy in (state.strategy, state.optimizer_strategy):
        notes += [n for n in notes_of(strategy) if n not in notes]
    for phase in sorted(state.moved_nothing):
        verb = "freed" if phase in OFFLOADS else "restored"
        notes.append(f"{phase} moved nothing: no device memory was {verb} in some cycle")
    if any(p.host.method != "vmhwm" for p in phases):
        notes.append("host peak sampled with psutil (clear_refs refused): may miss short peaks")
    if held >= 2**20:
        notes.append(
            f"the strategies held {format_bytes(held)} of host memory from their construction "
            "on: counted in every host figure (the zero is the host before any of their code ran)"
        )
    if counted:
        notes.append(
            f"the train phases before the first offload grew the host by {format_bytes(growth)}"
            f", {format_bytes(counted)} more than without the strategies: counted in every "
            "host figure (their code ran in them: a hook?)"
        )
    unseen = _unseen_recycling(runtime)
    if unseen:
        notes.append(
            f"CPU emulation: {format_bytes(unseen)} of device memory the strategy's ops wrote "
            "as they made it (copies to the device) lay in glibc's heap, where free host pages "
            "may have served it unseen: host figures may read low by up to that"
        )
    notes.append(f"optimizer: {state.model.optimizer_name}")
    if cfg.reference_check:
        notes.append("every train step after a load compared bit for bit with a no-offload run")
    return RunRecord(
        strategy=cfg.strategy,
        engine=cfg.engine,
        description=state.info.summary,
        payload_bytes=state.payload,
        grad_bytes=state.model.grad_bytes,
        baseline_host_bytes=baseline,
        gpu_baseline_bytes=state.gpu_baseline,
        phases=phases,
        summary=summary,
        integrity=list(state.problems),
        notes=notes,
        failure=state.failure,
        optimizer_strategy=cfg.optimizer_strategy,
        optimizer=state.model.optimizer_name,
        left_after_offload=[asdict(r) for r in state.residents],
        residency=state.residency,
        label_override=cfg.label,
        construction=state.construction,
        sequence=list(cfg.sequence),
        part_bytes=part_bytes(inventory_of(state.model)),
        pre_offload_growth_bytes=growth,
        framework_growth_bytes=framework,
        pre_offload_counted_bytes=counted,
    )


def _unseen_recycling(runtime: Any) -> int:
    """CPU emulation: heap bytes of device storages the strategy's ops wrote as they made
    them, whose pages may have been free host pages (``device_memory.Recycling``)."""
    memory = getattr(runtime, "device_memory", None)
    return int(memory.recycling.unmeasured_bytes) if memory is not None else 0


def pre_offload_growth(phases: list[Any]) -> int | None:
    """Host growth over the train phases before the first offload (None: no offload)."""
    first = next((i for i, p in enumerate(phases) if p.phase in OFFLOADS), None)
    if first is None:
        return None
    trains = [p for p in phases[:first] if p.phase == "train"]
    return sum(p.host.host_rss_after - p.host.host_rss_before for p in trains)


def construction_held(rec: Any) -> int:
    """Host bytes the strategies still held when their construction ended."""
    if rec is None:
        return 0
    return max(0, rec.host.host_rss_after - rec.host.host_rss_before)


def report_of(
    cfg: RunConfig,
    row: RunRecord,
    *,
    device: str,
    emulated: bool,
    note: str | None,
    extra_settings: dict[str, Any] | None = None,
) -> Report:
    """The report of one row: the environment, the model and the run's settings around it."""
    return Report(
        device=device,
        emulated=emulated,
        emulation_note=note,
        payload_bytes=row.payload_bytes,
        versions=environment.versions(),
        machine=environment.machine(),
        model=asdict(cfg.model),
        settings={**settings(cfg), **(extra_settings or {})},
        runs=[row],
    )


def settings(cfg: RunConfig) -> dict[str, Any]:
    """A run's settings as the report's ``settings`` object."""
    return {
        "engine": cfg.engine,
        "strategy": cfg.strategy,
        "optimizer_strategy": cfg.optimizer_strategy,
        "optimizer": asdict(cfg.optimizer),
        "cycles": cfg.cycles,
        "train_steps": cfg.train_steps,
        "seed": cfg.seed,
        "rollout_claim_bytes": cfg.rollout_claim_bytes,
        "gpu_limit_bytes": cfg.gpu_limit_bytes,
        "reference_check": cfg.reference_check,
        "optimizer_first": cfg.optimizer_first,
        "sequence": list(cfg.sequence),
        "emulation_malloc": cfg.emulation_malloc,
    }


def failed_record(cfg: RunConfig, failure: Failure) -> RunRecord:
    """A row with nothing measured: only why and where the run stopped."""
    return RunRecord(
        strategy=cfg.strategy,
        engine=cfg.engine,
        description=_summary(cfg.strategy),
        payload_bytes=0,
        grad_bytes=0,
        baseline_host_bytes=0,
        gpu_baseline_bytes=None,
        phases=[],
        summary=None,
        failure=failure,
        optimizer_strategy=cfg.optimizer_strategy,
        label_override=cfg.label,
    )


def _summary(spec: str) -> str:
    from offloadprobe.engine.strategies import model_strategy

    return str(model_strategy(spec).summary)
