"""Run offload/load cycles of one strategy on a freshly built probe model."""

from __future__ import annotations

import dataclasses
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import DeviceOutOfMemory
from offloadprobe.core.records import PhaseRecord, Report, RunRecord
from offloadprobe.core.units import format_bytes, gbps
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
from offloadprobe.measure.summary import LOADS, OFFLOADS, summarise

PhaseCallback = Callable[[PhaseRecord], None]


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks around phases: progress bars, and a log that survives a SIGKILL."""

    on_phase: PhaseCallback | None = None
    on_start: Callable[[int, str], None] | None = None


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records (for progress bars)."""
    per_cycle = 3 + bool(cfg.rollout_claim_bytes) + 2 * (cfg.optimizer_strategy != "none")
    return cfg.cycles * per_cycle


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


class _Stopped(Exception):
    """A strategy raised inside a phase; the record says where and why."""


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
        )
        moves_params = getattr(self.strategy, "moves_params", True)
        self.moves_optimizer = cfg.optimizer_strategy != "none"
        self.payload = self.model.payload_bytes
        self.param_moved = self.payload if moves_params else 0
        self.optimizer_bytes = 0
        self.optimizer_moved = 0
        self.phases: list[PhaseRecord] = []
        self.problems: list[str] = []
        self.not_offloaded: list[str] = []
        self.failure: str | None = None
        self.failure_kind: str | None = None
        self.failure_cycle: int | None = None
        self.failure_phase: str | None = None
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
            self.stop("out of memory", cycle, name, str(exc))
            raise
        except torch.OutOfMemoryError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "torch.OutOfMemoryError"
            if "out of memory" not in first.lower():
                first = f"CUDA out of memory: {first}"
            self.stop("out of memory", cycle, name, first)
            raise DeviceOutOfMemory(self.failure) from None
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.stop("crashed", cycle, name, f"{type(exc).__name__}: {exc}".splitlines()[0])
            raise _Stopped from None
        self.phases.append(rec)
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(rec)
        return result

    def stop(self, kind: str, cycle: int, phase: str, message: str) -> None:
        self.failure_kind, self.failure_cycle, self.failure_phase = kind, cycle, phase
        self.failure = f"{message} (cycle {cycle}, phase {phase})"

    def audit(self) -> None:
        """After both offloads: attach the residency audit to the parameter offload's record
        and count the optimizer bytes that left the device."""
        self.residents = audit.audit(self.model, self.runtime, self.snapshot)
        left = audit.bytes_by_key(self.residents)
        left_optimizer = sum(v for k, v in left.items() if k not in ("param_data", "grad_data"))
        self.optimizer_moved = max(0, self.optimizer_bytes - left_optimizer)
        index = max(i for i, p in enumerate(self.phases) if p.phase == "offload")
        self.phases[index] = dataclasses.replace(self.phases[index], left_on_device=left)
        for i, rec in enumerate(self.phases):
            if rec.phase == "offload optimizer" and rec.cycle == self.phases[index].cycle:
                self.phases[i] = dataclasses.replace(
                    rec,
                    bytes_moved=self.optimizer_moved,
                    gbps=gbps(self.optimizer_moved, rec.seconds),
                )
        self.judge_residency(left)

    def judge_residency(self, left: dict[str, int]) -> None:
        """A strategy that should move something and left all of it behind did not offload."""
        lines = []
        if self.param_moved and left.get("param_data", 0):
            lines.append(
                f"param_data {format_bytes(left['param_data'])} of "
                f"{format_bytes(self.param_moved)} still on the device after offload"
            )
        if self.moves_optimizer and self.optimizer_bytes and not self.optimizer_moved:
            lines.append(
                f"optimizer state {format_bytes(self.optimizer_bytes)}: none of it left the device"
            )
        for line in lines:
            if line not in self.not_offloaded:
                self.not_offloaded.append(line)

    def moves(self, offload: bool) -> list[tuple[str, Callable[[], None]]]:
        """The cycle's parameter and optimizer moves, in the configured order."""
        verb = "offload" if offload else "load"
        params = getattr(self.strategy, verb)
        steps = [(verb, lambda: params(self.model.chunks))]
        if self.moves_optimizer:
            optimizer = getattr(self.optimizer_strategy, verb)
            step = (f"{verb} optimizer", lambda: optimizer([self.model.optimizer]))
            steps.insert(0 if self.cfg.optimizer_first else 1, step)
        return steps

    def transfer(self, action: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with self.runtime.transfers():
                action()

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
        for name, action in self.moves(offload=True):
            moved = self.param_moved if name == "offload" else 0
            self.phase(cycle, name, self.transfer(action), moved)
        self.audit()
        if cfg.rollout_claim_bytes:
            resident = device_bytes(model) if self.runtime.emulated else 0
            self.phase(cycle, "rollout", lambda: claim(
                self.runtime, cfg.rollout_claim_bytes, resident=resident,
                limit=cfg.gpu_limit_bytes,
            ))  # fmt: skip
        for name, action in self.moves(offload=False):
            moved = self.param_moved if name == "load" else self.optimizer_moved
            self.phase(cycle, name, self.transfer(action), moved)
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
        except (DeviceOutOfMemory, _Stopped):
            pass
        finally:
            self.registered = _close(self.strategy) + _close(self.optimizer_strategy)


def run_cycles(cfg: RunConfig, runtime: Runtime, hooks: Hooks | None = None) -> RunRecord:
    """Build the model, then train/offload/load ``cfg.cycles`` times, measuring each phase."""
    try:
        state = _Cycles(cfg, runtime, hooks or Hooks())
    except (torch.OutOfMemoryError, DeviceOutOfMemory) as exc:
        return _setup_failed(cfg, exc)
    state.run()
    phases = state.phases
    offloads = [p for p in phases if p.phase in OFFLOADS]
    baseline = offloads[0].host.host_rss_before if offloads else 0
    summary = None
    if offloads and any(p.phase in LOADS for p in phases):
        summary = summarise(
            phases,
            payload_bytes=state.payload,
            baseline_host_bytes=baseline,
            gpu_baseline_bytes=state.gpu_baseline,
            registered_bytes=state.registered,
            integrity_ok=not state.problems,
            optimizer_state_bytes=state.optimizer_bytes,
            param_bytes_to_move=state.param_moved,
            optimizer_bytes_to_move=state.optimizer_moved if state.moves_optimizer else 0,
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
        failure_kind=state.failure_kind,
        failure_cycle=state.failure_cycle,
        failure_phase=state.failure_phase,
        not_offloaded=state.not_offloaded,
        optimizer_strategy=cfg.optimizer_strategy,
        optimizer=state.model.optimizer_name,
        left_after_offload=[asdict(r) for r in state.residents],
    )


def _setup_failed(cfg: RunConfig, exc: BaseException) -> RunRecord:
    """The device ran out of memory before the first phase (building the model or the
    no-offload reference run): a record that says so, never a traceback."""
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return RunRecord(
        strategy=cfg.strategy,
        description=describe(cfg.strategy),
        payload_bytes=0,
        grad_bytes=0,
        baseline_host_bytes=0,
        gpu_baseline_bytes=None,
        phases=[],
        summary=None,
        failure=f"{first} (phase setup)",
        failure_kind="out of memory",
        failure_phase="setup",
        optimizer_strategy=cfg.optimizer_strategy,
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
                "optimizer_first": cfg.optimizer_first,
            },
            runs=[record],
        )


__all__ = ["Hooks", "phases_per_run", "run", "run_cycles"]
