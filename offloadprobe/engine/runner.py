"""Run offload/load cycles of one strategy on a freshly built probe model."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import DeviceOutOfMemory
from offloadprobe.core.records import PhaseRecord, Report, RunRecord
from offloadprobe.core.units import gbps
from offloadprobe.engine import environment
from offloadprobe.engine.model import audit
from offloadprobe.engine.model.builder import ProbeModel, build_probe_model
from offloadprobe.engine.model.integrity import fingerprint_buffers, verify_round_trip
from offloadprobe.engine.model.reference import (
    Checkpoint,
    checkpoint,
    differences,
    reference_trajectory,
)
from offloadprobe.engine.model.residency import device_bytes
from offloadprobe.engine.model.train import train_step
from offloadprobe.engine.optimizer.strategies import make_optimizer_strategy
from offloadprobe.engine.rollout import claim, limit_device_memory
from offloadprobe.engine.runtime import Runtime, open_runtime
from offloadprobe.engine.strategies import MODEL_STRATEGIES, make_model_strategy
from offloadprobe.engine.strategies.user import is_user_spec
from offloadprobe.measure.meter import PhaseMeter
from offloadprobe.measure.sampler import Sampler
from offloadprobe.measure.summary import summarise

PhaseCallback = Callable[[PhaseRecord], None]


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks around phases: progress bars, and a log that survives a SIGKILL."""

    on_phase: PhaseCallback | None = None
    on_start: Callable[[int, str], None] | None = None
    sampler: Sampler | None = None
    """Marks phase spans on a running timeline sampler (``--trace``/``--plot``)."""


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records (for progress bars)."""
    return cfg.cycles * (4 if cfg.rollout_claim_bytes else 3)


def describe(spec: str) -> str:
    if is_user_spec(spec):
        return f"user strategy {spec}"
    return MODEL_STRATEGIES.get(spec).summary


def _train(model: ProbeModel, steps: int) -> float | None:
    loss = None
    for _ in range(steps):
        loss = train_step(model)
    return loss


def _close(strategy: Any) -> int:
    registered = int(getattr(strategy, "registered_bytes", 0))
    close = getattr(strategy, "close", None)
    if callable(close):
        close()
    return registered


class _Cycles:
    """One run's moving parts and what it has recorded so far."""

    def __init__(self, cfg: RunConfig, runtime: Runtime, hooks: Hooks) -> None:
        self.cfg, self.runtime, self.hooks = cfg, runtime, hooks
        self.reference: list[Checkpoint] = []
        if cfg.reference_check:
            self.reference = reference_trajectory(
                self.build, cfg.train_steps, cfg.cycles + 1, runtime.release
            )
        self.gpu_baseline = None if runtime.emulated else torch.cuda.memory_allocated()
        limit_device_memory(runtime, cfg.gpu_limit_bytes)
        self.model = self.build()
        self.strategy = make_model_strategy(cfg.strategy, runtime)
        self.optimizer_strategy = make_optimizer_strategy(cfg.optimizer_strategy, runtime)
        self.meter = PhaseMeter(
            runtime,
            device_in_host=(lambda: device_bytes(self.model)) if runtime.emulated else None,
            sampler=hooks.sampler,
        )
        moves_params = getattr(self.strategy, "moves_params", True)
        self.payload = self.model.payload_bytes
        self.param_moved = self.payload if moves_params else 0
        self.optimizer_bytes = 0
        self.optimizer_moved = 0
        self.phases: list[PhaseRecord] = []
        self.problems: list[str] = []
        self.failure: str | None = None
        self.residents: list[audit.ResidentTensor] = []
        self.registered = 0

    def build(self) -> ProbeModel:
        cfg = self.cfg
        return build_probe_model(cfg.model, self.runtime, seed=cfg.seed, optimizer=cfg.optimizer)

    def phase(self, cycle: int, name: str, action: Callable[[], Any], moved: int = 0) -> Any:
        if self.hooks.on_start is not None:
            self.hooks.on_start(cycle, name)
        try:
            rec, result = self.meter.measure(cycle, name, action, bytes_moved=moved)
        except DeviceOutOfMemory as exc:
            self.failure = f"device out of memory in cycle {cycle}, phase {name}: {exc}"
            raise
        if name == "offload":
            rec = self.audited(rec)
        self.phases.append(rec)
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(rec)
        return result

    def audited(self, rec: PhaseRecord) -> PhaseRecord:
        """Attach the residency audit; count the optimizer bytes that left the device."""
        self.residents = audit.audit(self.model, self.runtime, self.snapshot)
        left = audit.bytes_by_key(self.residents)
        left_optimizer = sum(v for k, v in left.items() if k not in ("param_data", "grad_data"))
        self.optimizer_moved = max(0, self.optimizer_bytes - left_optimizer)
        moved = self.param_moved + self.optimizer_moved
        return dataclasses.replace(
            rec, left_on_device=left, bytes_moved=moved, gbps=gbps(moved, rec.seconds)
        )

    def transfer(self, model_action: Callable, optimizer_action: Callable) -> Callable[[], None]:
        def run() -> None:
            with self.runtime.transfers():
                model_action(self.model.chunks)
                optimizer_action([self.model.optimizer])

        return run

    def check_step(self, label: str, index: int, got: Checkpoint) -> None:
        if self.reference:
            self.problems += differences(label, got, self.reference[index])

    def cycle(self, cycle: int) -> None:
        cfg, model = self.cfg, self.model
        loss = self.phase(cycle, "train", lambda: _train(model, cfg.train_steps))
        before = fingerprint_buffers(model.chunks)
        self.check_step(f"cycle {cycle} train step", cycle, Checkpoint(loss, before))
        self.snapshot = audit.snapshot_device_storage(model)
        self.optimizer_bytes = sum(audit.optimizer_state_bytes_by_key(model).values())
        offload = self.transfer(self.strategy.offload, self.optimizer_strategy.offload)
        self.phase(cycle, "offload", offload, self.param_moved)
        if cfg.rollout_claim_bytes:
            resident = device_bytes(model) if self.runtime.emulated else 0
            self.phase(cycle, "rollout", lambda: claim(
                self.runtime, cfg.rollout_claim_bytes, resident=resident,
                limit=cfg.gpu_limit_bytes,
            ))  # fmt: skip
        load = self.transfer(self.strategy.load, self.optimizer_strategy.load)
        self.phase(cycle, "load", load, self.param_moved + self.optimizer_moved)
        self.problems += verify_round_trip(
            model.chunks, before, cycle, grads_zeroed=bool(self.param_moved)
        )

    def run(self) -> None:
        try:
            for cycle in range(self.cfg.cycles):
                self.cycle(cycle)
                if self.problems:
                    break
            else:
                if self.reference:
                    after = checkpoint(self.model, self.cfg.train_steps)
                    self.problems += differences("train step after the last load", after,
                                                 self.reference[self.cfg.cycles])  # fmt: skip
        except DeviceOutOfMemory:
            pass
        finally:
            self.registered = _close(self.strategy) + _close(self.optimizer_strategy)


def run_cycles(cfg: RunConfig, runtime: Runtime, hooks: Hooks | None = None) -> RunRecord:
    """Build the model, then train/offload/load ``cfg.cycles`` times, measuring each phase."""
    state = _Cycles(cfg, runtime, hooks or Hooks())
    state.run()
    phases = state.phases
    offloads = [p for p in phases if p.phase == "offload"]
    baseline = offloads[0].host.host_rss_before if offloads else 0
    summary = None
    if offloads and any(p.phase == "load" for p in phases):
        summary = summarise(
            phases,
            payload_bytes=state.payload,
            baseline_host_bytes=baseline,
            gpu_baseline_bytes=state.gpu_baseline,
            registered_bytes=state.registered,
            integrity_ok=not state.problems,
            optimizer_state_bytes=state.optimizer_bytes,
        )
    notes = [runtime.note] if runtime.note else []
    if any(p.host.method != "vmhwm" for p in phases):
        notes.append("host peak sampled with psutil (clear_refs refused): may miss short peaks")
    notes.append(f"optimizer: {state.model.optimizer_name}")
    if cfg.reference_check:
        notes.append("every train step after a load compared bit for bit with a no-offload run")
    return RunRecord(
        strategy=cfg.strategy,
        description=describe(cfg.strategy),
        payload_bytes=state.payload,
        grad_bytes=state.model.grad_bytes,
        baseline_host_bytes=baseline,
        gpu_baseline_bytes=state.gpu_baseline,
        phases=phases,
        summary=summary,
        integrity=state.problems,
        notes=notes,
        failure=state.failure,
        optimizer_strategy=cfg.optimizer_strategy,
        optimizer=state.model.optimizer_name,
        left_after_offload=[asdict(r) for r in state.residents],
    )


def run(cfg: RunConfig, hooks: Hooks | None = None) -> Report:
    """One strategy, one process: the whole ``offloadprobe run``."""
    with open_runtime(cfg.device, cfg.seed) as runtime:
        record = run_cycles(cfg, runtime, hooks)
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
                "optimizer_strategy": cfg.optimizer_strategy,
                "optimizer": asdict(cfg.optimizer),
                "cycles": cfg.cycles,
                "train_steps": cfg.train_steps,
                "seed": cfg.seed,
                "rollout_claim_bytes": cfg.rollout_claim_bytes,
                "gpu_limit_bytes": cfg.gpu_limit_bytes,
                "reference_check": cfg.reference_check,
            },
            runs=[record],
        )


__all__ = ["Hooks", "phases_per_run", "run", "run_cycles"]
