"""Run offload/load cycles of one strategy on a freshly built probe model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from offloadprobe import environment
from offloadprobe.config import RunConfig
from offloadprobe.errors import DeviceOutOfMemory
from offloadprobe.measure import PhaseMeter
from offloadprobe.model.builder import build_probe_model
from offloadprobe.model.integrity import fingerprint_buffers, verify_round_trip
from offloadprobe.model.residency import device_bytes
from offloadprobe.model.train import train_step
from offloadprobe.records import PhaseRecord, Report, RunRecord
from offloadprobe.rollout import claim, limit_device_memory
from offloadprobe.runtime import Runtime, open_runtime
from offloadprobe.strategies import MODEL_STRATEGIES, make_model_strategy
from offloadprobe.strategies.user import is_user_spec
from offloadprobe.summary import summarise

PhaseCallback = Callable[[PhaseRecord], None]


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks around phases: progress bars, and a log that survives a SIGKILL."""

    on_phase: PhaseCallback | None = None
    on_start: Callable[[int, str], None] | None = None


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records (for progress bars)."""
    return cfg.cycles * (4 if cfg.rollout_claim_bytes else 3)


def describe(spec: str) -> str:
    if is_user_spec(spec):
        return f"user strategy {spec}"
    return MODEL_STRATEGIES.get(spec).summary


def _train(model, steps: int) -> float | None:
    loss = None
    for _ in range(steps):
        loss = train_step(model)
    return loss


class _Cycles:
    """One run's moving parts and what it has recorded so far."""

    def __init__(self, cfg: RunConfig, runtime: Runtime, hooks: Hooks) -> None:
        self.cfg, self.runtime, self.hooks = cfg, runtime, hooks
        self.gpu_baseline = None if runtime.emulated else torch.cuda.memory_allocated()
        limit_device_memory(runtime, cfg.gpu_limit_bytes)
        self.model = build_probe_model(cfg.model, runtime, seed=cfg.seed)
        self.strategy = make_model_strategy(cfg.strategy, runtime)
        self.meter = PhaseMeter(
            runtime,
            device_in_host=(lambda: device_bytes(self.model)) if runtime.emulated else None,
        )
        self.payload = self.model.payload_bytes
        self.phases: list[PhaseRecord] = []
        self.problems: list[str] = []
        self.failure: str | None = None

    def phase(self, cycle: int, name: str, action: Callable[[], Any], moved: int = 0) -> None:
        if self.hooks.on_start is not None:
            self.hooks.on_start(cycle, name)
        try:
            rec, _ = self.meter.measure(cycle, name, action, bytes_moved=moved)
        except DeviceOutOfMemory as exc:
            self.failure = f"device out of memory in cycle {cycle}, phase {name}: {exc}"
            raise
        self.phases.append(rec)
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(rec)

    def transfer(self, action: Callable[[list], None]) -> Callable[[], None]:
        def run() -> None:
            with self.runtime.transfers():
                action(self.model.chunks)

        return run

    def cycle(self, cycle: int) -> None:
        cfg, model = self.cfg, self.model
        self.phase(cycle, "train", lambda: _train(model, cfg.train_steps))
        before = fingerprint_buffers(model.chunks)
        self.phase(cycle, "offload", self.transfer(self.strategy.offload), self.payload)
        if cfg.rollout_claim_bytes:
            resident = device_bytes(model) if self.runtime.emulated else 0
            self.phase(cycle, "rollout", lambda: claim(
                self.runtime, cfg.rollout_claim_bytes, resident=resident,
                limit=cfg.gpu_limit_bytes,
            ))  # fmt: skip
        self.phase(cycle, "load", self.transfer(self.strategy.load), self.payload)
        self.problems += verify_round_trip(model.chunks, before, cycle)

    def run(self) -> None:
        try:
            for cycle in range(self.cfg.cycles):
                self.cycle(cycle)
                if self.problems:
                    break
        except DeviceOutOfMemory:
            pass
        finally:
            self.registered = int(getattr(self.strategy, "registered_bytes", 0))
            close = getattr(self.strategy, "close", None)
            if callable(close):
                close()


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
        )
    notes = [runtime.note] if runtime.note else []
    if any(p.host.method != "vmhwm" for p in phases):
        notes.append("host peak sampled with psutil (clear_refs refused): may miss short peaks")
    notes.append(f"optimizer: {state.model.optimizer_name}")
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
                "cycles": cfg.cycles,
                "train_steps": cfg.train_steps,
                "seed": cfg.seed,
                "rollout_claim_bytes": cfg.rollout_claim_bytes,
                "gpu_limit_bytes": cfg.gpu_limit_bytes,
            },
            runs=[record],
        )
