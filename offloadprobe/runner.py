"""Run offload/load cycles of one strategy on a freshly built probe model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import torch

from offloadprobe import environment
from offloadprobe.config import RunConfig
from offloadprobe.measure import PhaseMeter
from offloadprobe.model.builder import build_probe_model
from offloadprobe.model.integrity import fingerprint_buffers, verify_round_trip
from offloadprobe.model.residency import device_bytes
from offloadprobe.model.train import train_step
from offloadprobe.records import PhaseRecord, Report, RunRecord
from offloadprobe.runtime import Runtime, open_runtime
from offloadprobe.strategies import MODEL_STRATEGIES, make_model_strategy
from offloadprobe.strategies.user import is_user_spec
from offloadprobe.summary import summarise

PhaseCallback = Callable[[PhaseRecord], None]


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records (for progress bars)."""
    return cfg.cycles * 3


def describe(spec: str) -> str:
    if is_user_spec(spec):
        return f"user strategy {spec}"
    return MODEL_STRATEGIES.get(spec).summary


def _train(model, steps: int) -> float | None:
    loss = None
    for _ in range(steps):
        loss = train_step(model)
    return loss


def _in_transfers(runtime: Runtime, action: Callable[[list], None], models: list) -> None:
    with runtime.transfers():
        action(models)


def run_cycles(
    cfg: RunConfig, runtime: Runtime, *, on_phase: PhaseCallback | None = None
) -> RunRecord:
    """Build the model, then train/offload/load ``cfg.cycles`` times, measuring each phase."""
    gpu_baseline = None if runtime.emulated else torch.cuda.memory_allocated()
    model = build_probe_model(cfg.model, runtime, seed=cfg.seed)
    strategy = make_model_strategy(cfg.strategy, runtime)
    meter = PhaseMeter(
        runtime, device_in_host=(lambda: device_bytes(model)) if runtime.emulated else None
    )
    payload = model.payload_bytes
    phases: list[PhaseRecord] = []
    problems: list[str] = []

    def record(rec: PhaseRecord) -> None:
        phases.append(rec)
        if on_phase is not None:
            on_phase(rec)

    try:
        for cycle in range(cfg.cycles):
            rec, _ = meter.measure(cycle, "train", lambda: _train(model, cfg.train_steps))
            record(rec)
            before = fingerprint_buffers(model.chunks)
            rec, _ = meter.measure(
                cycle,
                "offload",
                lambda: _in_transfers(runtime, strategy.offload, model.chunks),
                bytes_moved=payload,
            )
            record(rec)
            rec, _ = meter.measure(
                cycle,
                "load",
                lambda: _in_transfers(runtime, strategy.load, model.chunks),
                bytes_moved=payload,
            )
            record(rec)
            problems += verify_round_trip(model.chunks, before, cycle)
            if problems:
                break
    finally:
        registered = int(getattr(strategy, "registered_bytes", 0))
        close = getattr(strategy, "close", None)
        if callable(close):
            close()
    baseline = next(p.host.host_rss_before for p in phases if p.phase == "offload")
    summary = summarise(
        phases,
        payload_bytes=payload,
        baseline_host_bytes=baseline,
        gpu_baseline_bytes=gpu_baseline,
        registered_bytes=registered,
        integrity_ok=not problems,
    )
    notes = [runtime.note] if runtime.note else []
    if any(p.host.method != "vmhwm" for p in phases):
        notes.append("host peak sampled with psutil (clear_refs refused): may miss short peaks")
    notes.append(f"optimizer: {model.optimizer_name}")
    return RunRecord(
        strategy=cfg.strategy,
        description=describe(cfg.strategy),
        payload_bytes=payload,
        grad_bytes=model.grad_bytes,
        baseline_host_bytes=baseline,
        gpu_baseline_bytes=gpu_baseline,
        phases=phases,
        summary=summary,
        integrity=problems,
        notes=notes,
    )


def run(cfg: RunConfig, *, on_phase: PhaseCallback | None = None) -> Report:
    """One strategy, one process: the whole ``offloadprobe run``."""
    with open_runtime(cfg.device, cfg.seed) as runtime:
        record = run_cycles(cfg, runtime, on_phase=on_phase)
        return Report(
            device=runtime.device,
            emulated=runtime.emulated,
            emulation_note=runtime.note,
            payload_bytes=record.payload_bytes,
            versions=environment.versions(),
            machine=environment.machine(),
            model=asdict(cfg.model),
            settings={
                "strategy": cfg.strategy,
                "cycles": cfg.cycles,
                "train_steps": cfg.train_steps,
                "seed": cfg.seed,
            },
            runs=[record],
        )
