"""Run offload/load cycles of one strategy on a freshly built probe model."""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import DeviceOutOfMemory, UsageError
from offloadprobe.core.records import PhaseRecord, Report, RunRecord
from offloadprobe.core.units import format_bytes, gbps
from offloadprobe.engine import environment
from offloadprobe.engine.model import audit
from offloadprobe.engine.model.builder import ProbeModel, build_probe_model
from offloadprobe.engine.model.integrity import fingerprint_state, verify_round_trip
from offloadprobe.engine.model.reference import (
    Checkpoint,
    checkpoint,
    differences,
    reference_trajectory,
)
from offloadprobe.engine.model.residency import device_bytes
from offloadprobe.engine.model.train import train_step
from offloadprobe.engine.optimizer.strategies import optimizer_strategy
from offloadprobe.engine.rollout import claim, limit_device_memory
from offloadprobe.engine.runtime import Runtime, open_runtime
from offloadprobe.engine.runtime.emulation import on_device
from offloadprobe.engine.strategies import model_strategy
from offloadprobe.engine.strategies.base import (
    ReleasesThroughDriver,
    close,
    ddp_buffers,
    registered_bytes,
    released_storages,
)
from offloadprobe.engine.world.fence import PhaseFence
from offloadprobe.measure.meter import PhaseMeter
from offloadprobe.measure.sampler import Sampler
from offloadprobe.measure.summary import LOADS, OFFLOADS, summarise

PhaseCallback = Callable[[PhaseRecord], None]

COLLECTIVE_PHASES = ("train",)
"""Phases whose work includes collectives: over several ranks, a rank that fails in one
ends its process (its peers may be waiting for it inside a collective)."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks around phases: progress bars, and a log that survives a SIGKILL."""

    on_phase: PhaseCallback | None = None
    on_start: Callable[[int, str], None] | None = None
    sampler: Sampler | None = None
    """Marks phase spans on a running timeline sampler (``--trace``/``--plot``)."""
    fence: PhaseFence | None = None
    """Runs over several ranks: aligns every phase across ranks and reads the node cgroup."""


def moves_optimizer(cfg: RunConfig) -> bool:
    """Whether the optimizer strategy moves anything (its own phases), by its descriptor;
    a strategy that does not declare its keys (the user's) is taken to move."""
    info = optimizer_strategy(cfg.optimizer_strategy)
    return info.moved_keys is None or bool(info.moved_keys(cfg.optimizer.precision_aware))


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records (for progress bars)."""
    per_cycle = 3 + bool(cfg.rollout_claim_bytes) + 2 * moves_optimizer(cfg)
    return cfg.cycles * per_cycle


def _train(model: ProbeModel, steps: int) -> float | None:
    loss = None
    for _ in range(steps):
        loss = train_step(model)
    return loss


def _device_in_use(runtime: Runtime) -> int:
    """Device bytes allocated right now (after freeing what nothing references)."""
    runtime.synchronize()
    memory = runtime.device_memory
    if memory is not None:
        runtime.settle()
        return memory.device_bytes()
    return torch.cuda.memory_allocated()


def _within(code: Callable[[], Any], action: Callable[[Any], Any], arg: Any) -> Any:
    """``action(arg)`` inside ``code()`` (the runtime's context for a strategy's code)."""
    with code():
        return action(arg)


def _close(strategy: Any) -> int:
    registered = registered_bytes(strategy)
    close(strategy)
    return registered


class EmulationBypassed(RuntimeError):
    """A strategy changed device memory where CPU emulation cannot account for it."""


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
        self.info = model_strategy(cfg.strategy)
        before = _device_in_use(runtime)
        with runtime.strategy_code():
            self.strategy = self.info.build(runtime)
            self.optimizer_strategy = optimizer_strategy(cfg.optimizer_strategy).build(runtime)
        self.built_on_device = max(0, _device_in_use(runtime) - before)
        """Device bytes the strategies still hold from their construction (a buffer made
        there could hold a copy the offload keeps)."""
        memory = runtime.device_memory
        self.meter = PhaseMeter(
            runtime,
            arena=memory,
            device_counters=(lambda: (memory.freed_bytes, memory.allocated_bytes))
            if memory is not None
            else None,
            sampler=hooks.sampler,
            cgroup_reset=hooks.fence is None,
        )
        self.payload = self.model.payload_bytes
        self.param_to_move = self.payload if self.info.moves_params else 0
        self.moves_optimizer = moves_optimizer(cfg)
        self.optimizer_bytes = 0
        self.optimizer_moved = 0
        self.grads_freed = False
        self.not_offloaded: list[str] = []
        self.moved_nothing: set[str] = set()
        self.phases: list[PhaseRecord] = []
        self.problems: list[str] = []
        self.failure: str | None = None
        self.failure_kind: str | None = None
        self.failure_cycle: int | None = None
        self.failure_phase: str | None = None
        self.residents: list[audit.ResidentTensor] = []
        self.registered = 0
        self.notes: list[str] = []

    def build(self) -> ProbeModel:
        cfg = self.cfg
        return build_probe_model(cfg.model, self.runtime, seed=cfg.seed, optimizer=cfg.optimizer)

    def phase(self, cycle: int, name: str, action: Callable[[], Any]) -> Any:
        if self.hooks.on_start is not None:
            self.hooks.on_start(cycle, name)
        grads_before = _grad_device_bytes(self.model)
        fence = self.hooks.fence
        if fence is not None:
            fence.before()
        raised: BaseException | None = None
        memory = self.runtime.device_memory
        bypassed = memory.bypassed_bytes if memory is not None else 0
        try:
            rec, result = self.meter.measure(cycle, name, action)
            if memory is not None and memory.bypassed_bytes > bypassed and name != "train":
                moved = format_bytes(memory.bypassed_bytes - bypassed)
                raise EmulationBypassed(
                    f"CPU emulation cannot measure this phase: {moved} of device storage "
                    "were resized outside torch.UntypedStorage.resize_ "
                    "(torch._C.StorageBase.resize_ or an op's out=); on a GPU it is measured"
                )
        except DeviceOutOfMemory as exc:
            self.stop("out of memory", cycle, name, str(exc))
            raised = exc
        except EmulationBypassed as exc:  # the run cannot be measured here: no traceback
            self.stop("crashed", cycle, name, str(exc))
            raised = _Stopped()
        except torch.OutOfMemoryError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "torch.OutOfMemoryError"
            if "out of memory" not in first.lower():
                first = f"CUDA out of memory: {first}"
            self.stop("out of memory", cycle, name, first)
            raised = DeviceOutOfMemory(self.failure)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.stop("crashed", cycle, name, f"{type(exc).__name__}: {exc}".splitlines()[0])
            raised = _Stopped()
        if fence is not None and raised is not None and name in COLLECTIVE_PHASES:
            fence.abort(self.failure_kind or "crashed", self.failure or "crashed")
        if fence is not None:
            failed = fence.after(cycle, name, self.failure if raised is not None else None)
            if raised is None and failed:
                rank, _why = failed[0]
                self.notes.append(f"stopped at cycle {cycle}, phase {name}: rank {rank} failed")
                raised = _Stopped()
        if raised is not None:
            raise raised
        if name in OFFLOADS or name in LOADS:
            rec = self.measured_transfer(rec, grads_before, _grad_device_bytes(self.model))
        self.phases.append(rec)
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(rec)
        return result

    def stop(self, kind: str, cycle: int, phase: str, message: str) -> None:
        self.failure_kind, self.failure_cycle, self.failure_phase = kind, cycle, phase
        self.failure = f"{message} (cycle {cycle}, phase {phase})"

    def measured_transfer(self, rec: PhaseRecord, grads_before: int, grads_after: int) -> Any:
        """Bytes moved = device bytes the phase really freed (offloads) or restored (loads),
        less ``grad_data`` (discarded on offload, zeroed on load: nothing is copied)."""
        if rec.phase in OFFLOADS:
            device, grads = rec.device_freed_bytes, max(0, grads_before - grads_after)
            if rec.phase == "offload":
                self.grads_freed = grads > 0
        else:
            device, grads = rec.device_allocated_bytes, max(0, grads_after - grads_before)
        driver = self.driver_delta(rec)
        if driver is not None:  # outside PyTorch's allocator: the driver's own figure
            device = driver
            grads = 0
        moved = max(0, (device or 0) - grads)
        if not moved:
            self.moved_nothing.add(rec.phase)
        return dataclasses.replace(rec, bytes_moved=moved, gbps=gbps(moved, rec.seconds))

    def driver_delta(self, rec: PhaseRecord) -> int | None:
        """For a strategy that releases through the driver: device bytes the driver got back
        (offloads) or handed out (loads) over the phase, from ``mem_get_info``; else None."""
        if not isinstance(self.strategy, ReleasesThroughDriver) or not self.phases:
            return None
        before, after = self.phases[-1].gpu, rec.gpu
        if before is None or after is None:
            return None
        change = before.device_used_after - after.device_used_after
        return max(0, change if rec.phase in OFFLOADS else -change)

    def confirmed_released(self) -> frozenset[int]:
        """Storage keys a strategy released through the driver, if the driver agrees: the
        device memory in use fell over this cycle's offloads by at least their bytes."""
        storages = released_storages(self.strategy, self.model.chunks)
        if not storages:
            return frozenset()
        cycle = self.phases[-1].cycle
        offloads = [
            i for i, p in enumerate(self.phases) if p.cycle == cycle and p.phase in OFFLOADS
        ]
        first, last = self.phases[offloads[0] - 1].gpu, self.phases[offloads[-1]].gpu
        claimed = sum(s.nbytes() for s in {s._cdata: s for s in storages}.values())
        if first is None or last is None:
            return frozenset()
        freed = first.device_used_after - last.device_used_after
        if freed < 0.97 * claimed:
            return frozenset()
        return frozenset(s._cdata for s in storages)

    def audit(self) -> None:
        """After every offload phase of a cycle: attach the residency audit to the parameter
        offload's record, count the optimizer bytes that left the device, and judge."""
        released = self.confirmed_released()
        self.residents = audit.audit(self.model, self.runtime, self.snapshot, released)
        left = audit.bytes_by_key(self.residents)
        not_state = ("param_data", "grad_data", audit.ALLOCATED_DURING_OFFLOAD)
        left_optimizer = sum(v for k, v in left.items() if k not in not_state)
        self.optimizer_moved = max(0, self.optimizer_bytes - left_optimizer)
        index = max(i for i, p in enumerate(self.phases) if p.phase == "offload")
        self.phases[index] = dataclasses.replace(self.phases[index], left_on_device=left)
        self.judge_residency(left, self.phases[index].bytes_moved)

    def judge_residency(self, left: dict[str, int], param_moved: int) -> None:
        """A strategy that should move something and left it on the device did not offload."""
        lines = []
        if self.param_to_move and left.get("param_data", 0):
            lines.append(
                f"param_data {format_bytes(left['param_data'])} still on device after offload"
            )
        elif self.param_to_move:
            # What the offload gave back for the parameters: its net device change, less
            # what the strategy made on the device when it was built (a buffer there could
            # hold the copy) and less optimizer state it moved in the same phase (moving
            # state cannot pay for parameters kept on the device).
            paid = self.built_on_device + (0 if self.moves_optimizer else self.optimizer_moved)
            gave = max(0, param_moved - paid)
            # less than half: a copy kept on the device, not a staging buffer kept for reuse
            # (what a strategy keeps there is the residency audit's and --max-gpu-residual's)
            if gave < self.param_to_move // 2:
                lines.append(
                    f"param_data freed, but the device gave back {format_bytes(gave)} net of "
                    f"{format_bytes(self.param_to_move)}"
                    + (f" (less {format_bytes(paid)} the strategy holds otherwise)" if paid else "")
                    + " (a copy kept on the device?)"
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
        code = self.runtime.strategy_code
        steps = [(verb, lambda: _within(code, params, self.model.chunks))]
        if self.moves_optimizer:
            optimizer = getattr(self.optimizer_strategy, verb)
            step = (f"{verb} optimizer", lambda: _within(code, optimizer, [self.model.optimizer]))
            steps.insert(0 if self.cfg.optimizer_first else 1, step)
        return steps

    def check_step(self, label: str, index: int, got: Checkpoint) -> None:
        if self.reference:
            self.problems += differences(label, got, self.reference[index])

    def cycle(self, cycle: int) -> None:
        cfg, model = self.cfg, self.model
        loss = self.phase(cycle, "train", lambda: _train(model, cfg.train_steps))
        before = fingerprint_state(model)
        self.check_step(f"cycle {cycle} train step", cycle, Checkpoint(loss, before.buffers))
        self.snapshot = audit.snapshot_device_storage(model)
        self.optimizer_bytes = sum(audit.optimizer_state_bytes_by_key(model).values())
        for name, action in self.moves(offload=True):
            self.phase(cycle, name, action)
        self.audit()
        if cfg.rollout_claim_bytes:
            resident = device_bytes(model) if self.runtime.emulated else 0
            self.phase(cycle, "rollout", lambda: claim(
                self.runtime, cfg.rollout_claim_bytes, resident=resident,
                limit=cfg.gpu_limit_bytes,
            ))  # fmt: skip
        for name, action in self.moves(offload=False):
            self.phase(cycle, name, action)
        self.problems += verify_round_trip(model, before, cycle, grads_zeroed=self.grads_freed)

    def stops_here(self, cycle: int) -> bool:
        """Whether the cycles end after ``cycle``: a corruption or a strategy that did not
        offload, on this rank or (over several ranks) on any, so all ranks stop together."""
        here = bool(self.problems or self.not_offloaded)
        fence = self.hooks.fence
        if fence is None:
            return here
        failed = fence.failed_anywhere("stop" if here else None)
        if failed and not here:
            ranks = ", ".join(str(rank) for rank, _ in failed)
            self.notes.append(f"stopped after cycle {cycle}: rank {ranks} found a problem")
        return bool(failed)

    def run(self) -> None:
        try:
            for cycle in range(self.cfg.cycles):
                self.cycle(cycle)
                if self.stops_here(cycle):
                    break
            else:
                if self.reference:
                    after = checkpoint(self.model, self.cfg.train_steps)
                    self.problems += differences("train step after the last load", after,
                                                 self.reference[self.cfg.cycles])  # fmt: skip
        except (DeviceOutOfMemory, _Stopped):
            pass
        finally:
            with self.runtime.strategy_code():
                self.registered = _close(self.strategy) + _close(self.optimizer_strategy)


def _grad_device_bytes(model: ProbeModel) -> int:
    """Device bytes the DDP ``grad_data`` buffers hold right now (by fact)."""
    seen: dict[int, int] = {}
    for buffer in ddp_buffers(model.chunks):
        storage = buffer.grad_data.untyped_storage()
        if on_device(buffer.grad_data):
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


def run_cycles(cfg: RunConfig, runtime: Runtime, hooks: Hooks | None = None) -> RunRecord:
    """Build the model, then train/offload/load ``cfg.cycles`` times, measuring each phase."""
    try:
        state = _Cycles(cfg, runtime, hooks or Hooks())
    except (torch.OutOfMemoryError, DeviceOutOfMemory) as exc:
        return _setup_failed(cfg, exc)
    except UsageError:
        raise
    except Exception as exc:  # megatron or a strategy failed while building: a verdict
        traceback.print_exc(file=sys.stderr)
        return _setup_failed(cfg, exc, kind="crashed")
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
            param_bytes_to_move=state.param_to_move,
            optimizer_bytes_to_move=state.optimizer_moved if state.moves_optimizer else 0,
        )
    notes = [runtime.note] if runtime.note else []
    notes += state.notes
    for phase in sorted(state.moved_nothing):
        verb = "freed" if phase in OFFLOADS else "restored"
        notes.append(f"{phase} moved nothing: no device memory was {verb} in some cycle")
    if any(p.host.method != "vmhwm" for p in phases):
        notes.append("host peak sampled with psutil (clear_refs refused): may miss short peaks")
    notes.append(f"optimizer: {state.model.optimizer_name}")
    if cfg.reference_check:
        notes.append("every train step after a load compared bit for bit with a no-offload run")
    return RunRecord(
        strategy=cfg.strategy,
        description=state.info.summary,
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
        optimizer_strategy=cfg.optimizer_strategy,
        optimizer=state.model.optimizer_name,
        left_after_offload=[asdict(r) for r in state.residents],
        not_offloaded=state.not_offloaded,
    )


def _setup_failed(cfg: RunConfig, exc: BaseException, *, kind: str = "out of memory") -> RunRecord:
    """The run failed before the first phase (building the model or the no-offload
    reference run): out of memory, or a crash; a record that says so."""
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    if kind == "crashed":
        first = f"{type(exc).__name__}: {first}"
    return failed_run(cfg, failure=f"{first} (phase setup)", kind=kind, phase="setup")


def failed_run(
    cfg: RunConfig, *, failure: str, kind: str, cycle: int | None = None, phase: str | None = None
) -> RunRecord:
    """A row with nothing measured: only why and where the run stopped."""
    return RunRecord(
        strategy=cfg.strategy,
        description=model_strategy(cfg.strategy).summary,
        payload_bytes=0,
        grad_bytes=0,
        baseline_host_bytes=0,
        gpu_baseline_bytes=None,
        phases=[],
        summary=None,
        failure=failure,
        failure_kind=kind,
        failure_cycle=cycle,
        failure_phase=phase,
        optimizer_strategy=cfg.optimizer_strategy,
    )


def run(cfg: RunConfig, hooks: Hooks | None = None) -> Report | None:
    """One strategy: the whole ``offloadprobe run`` in this process, or this rank's share of
    it under torchrun (then rank 0 returns the world's report and other ranks None)."""
    if int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
        from offloadprobe.engine.world.run import run_rank

        return run_rank(cfg, hooks or Hooks())
    with open_runtime(cfg.device, cfg.seed) as runtime:
        record = run_cycles(cfg, runtime, hooks)
        return report_of(
            cfg, record, device=runtime.device, emulated=runtime.emulated, note=runtime.note
        )


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
    }


__all__ = ["Hooks", "failed_run", "phases_per_run", "report_of", "run", "run_cycles", "settings"]
