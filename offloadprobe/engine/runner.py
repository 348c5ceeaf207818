"""Run offload/load cycles of one strategy on a freshly built probe model: the facts.

The runner measures and records; it never judges. What a recorded fact means (not
offloaded, corrupted, over budget) is ``core.verdicts``'s; the runner only asks those
rules whether to stop after a cycle. One process or one rank alike: the worker chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import PhaseRecord, Report, ResidencyFact, RunRecord
from offloadprobe.core.verdicts import cycle_residency_problems
from offloadprobe.engine import offload_window
from offloadprobe.engine.channel import Findings
from offloadprobe.engine.descriptors import call_move, close, registered_bytes
from offloadprobe.engine.engine_state import engine_factory, without_reference
from offloadprobe.engine.fail_closed import check_holdings
from offloadprobe.engine.model import audit
from offloadprobe.engine.model.integrity import fingerprint_state, verify_round_trip
from offloadprobe.engine.model.ledger import DeviceLedger
from offloadprobe.engine.model.prior_regions import PriorRegions
from offloadprobe.engine.model.reference import Checkpoint, checkpoint, differences
from offloadprobe.engine.model.residency import device_bytes
from offloadprobe.engine.offload_window import left_numbers, window_fields, window_start
from offloadprobe.engine.optimizer.strategies import optimizer_strategy
from offloadprobe.engine.phase_errors import check_bypass, phase_failure, setup_failure
from offloadprobe.engine.rollout import claim, limit_device_memory
from offloadprobe.engine.run_record import failed_record, record_of, report_of
from offloadprobe.engine.runtime.session import Runtime, runtime_for
from offloadprobe.engine.sequence import run_sequence
from offloadprobe.engine.strategies import model_strategy
from offloadprobe.engine.transfers import (
    confirmed_released,
    driver_delta,
    grad_device_bytes,
    measured_transfer,
)
from offloadprobe.engine.world.fence import PhaseFence
from offloadprobe.engine.zero import import_builtins, no_strategy_run
from offloadprobe.measure.meter import PhaseMeter
from offloadprobe.measure.sampler import Sampler
from offloadprobe.measure.summary import LOADS, OFFLOADS

PhaseCallback = Callable[[PhaseRecord], None]
BuildState = Callable[..., Any]
"""``(model config, runtime, *, seed, optimizer) -> training state`` (``engine_state``)."""

COLLECTIVE_PHASES = ("train",)
"""Phases whose work includes collectives: over several ranks, a rank that fails in one
ends its process (its peers may be waiting for it inside a collective)."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks around phases: progress, and a log that survives a SIGKILL."""

    on_phase: PhaseCallback | None = None
    on_start: Callable[[int, str], None] | None = None
    sampler: Sampler | None = None
    """Marks phase spans on a running timeline sampler (``--trace``/``--plot``)."""
    fence: PhaseFence | None = None
    """Runs over several ranks: aligns every phase across ranks and reads the node cgroup."""
    group: str | None = None
    """Where host figures come from besides the process: ``cgroup`` (the worker's or
    rank's own), ``tree``/``rank tree`` (its process tree), None (the process alone)."""
    channel: Any = None
    """The worker's channel to its parent (``engine.channel``): problems go there too."""


def moves_optimizer(cfg: RunConfig) -> bool:
    """Whether the optimizer strategy moves anything (its own phases), by its descriptor."""
    return bool(optimizer_strategy(cfg.optimizer_strategy).moves(cfg.optimizer.precision_aware))


def _within(runtime: Runtime, action: Callable[..., Any], arg: Any) -> Any:
    """``action(arg)`` (a load with its device, ``call_move``) inside the runtime's context
    for a strategy's code."""
    with runtime.strategy_code():
        return call_move(action, arg, runtime.load_device)


class _Stopped(Exception):
    """A phase failed; the record says where and why."""


class _Cycles:
    """One run's moving parts and what it has recorded so far."""

    def __init__(
        self, cfg: RunConfig, runtime: Runtime, hooks: Hooks, build_state: BuildState | None
    ) -> None:
        self.cfg, self.runtime, self.hooks = cfg, runtime, hooks
        self.build_state = build_state or engine_factory(cfg.engine)
        memory = runtime.device_memory
        self.meter = PhaseMeter(
            runtime,
            arena=memory,
            device_counters=(lambda: (memory.freed_bytes, memory.allocated_bytes))
            if memory is not None
            else None,
            sampler=hooks.sampler,
            cgroup_reset=(hooks.fence is None or hooks.group == "cgroup")
            and not getattr(hooks.channel, "owns_peaks", 0),
            group=hooks.group,
        )
        self.no_strategy = no_strategy_run(cfg, self.build, runtime.release, self.meter)
        self.reference: list[Checkpoint] = self.no_strategy.points
        self.gpu_baseline = None if runtime.emulated else torch.cuda.memory_allocated()
        limit_device_memory(runtime, cfg.gpu_limit_bytes)
        self.ledger = DeviceLedger(runtime)
        self.prior_regions = PriorRegions.take(runtime)  # the search leaves these alone
        self.model = self.build()
        self.search = offload_window.make_search(runtime, self.model)  # its memory in the zero
        check_holdings(cfg, self.model, moves_optimizer=moves_optimizer(cfg))
        import_builtins(cfg)  # offloadprobe's own modules, before the zero
        before = self.ledger.before(self.model)  # before a user's strategy module is imported
        self.construction, built = self.meter.measure(0, "construction", self.construct)
        """From before the strategies' modules are imported (the zero: ``engine.zero``)."""
        self.info, self.strategy, self.optimizer_strategy = built
        self.built_on_device = self.ledger.after_construction(self.model, before)
        """Device bytes (by totals) they hold from construction (a copy could sit there)."""
        self.payload = self.model.payload_bytes
        self.param_to_move = self.payload if self.info.moves_params else 0
        self.moves_optimizer = moves_optimizer(cfg)
        self.optimizer_bytes = 0
        self.optimizer_moved = 0
        self.grads_freed = False
        self.moved_nothing: set[str] = set()
        self.phases: list[PhaseRecord] = []
        self.problems: list[str] = Findings(hooks.channel)  # each told to the parent
        self.failure: Failure | None = None
        self.residency: list[ResidencyFact] = []
        self.residents: list[audit.ResidentTensor] = []
        self.registered = 0
        self.notes: list[str] = []

    def build(self) -> Any:
        cfg = self.cfg
        return self.build_state(cfg.model, self.runtime, seed=cfg.seed, optimizer=cfg.optimizer)

    def construct(self) -> tuple[Any, Any, Any]:
        """Both strategies, their modules imported and built as the user's code runs (the
        runtime's strategy context): the model strategy's descriptor and both objects."""
        with self.runtime.strategy_code():
            info = model_strategy(self.cfg.strategy)
            params = info.build(self.runtime)
            optimizer = optimizer_strategy(self.cfg.optimizer_strategy).build(self.runtime)
        return info, params, optimizer

    def phase(self, cycle: int, name: str, action: Callable[[], Any]) -> Any:
        if self.hooks.on_start is not None:
            self.hooks.on_start(cycle, name)
        grads_before = grad_device_bytes(self.model)
        fence = self.hooks.fence
        if fence is not None:
            fence.before()
        memory = self.runtime.device_memory
        bypassed = memory.bypassed_bytes if memory is not None else 0
        own = self.ledger.own
        places = own.before_train(self.model.optimizer) if name == "train" else None
        try:
            rec, result = self.meter.measure(cycle, name, action)
            if places is not None:  # what the optimizer's step made is its own state
                own.after_train(self.model.optimizer, places)
            check_bypass(memory, bypassed, name)
        except Exception as exc:
            self.failure = phase_failure(exc, cycle, name)
        if fence is not None and self.failure is not None and name in COLLECTIVE_PHASES:
            fence.abort(self.failure)
        stopped = self.failure is not None
        if fence is not None:
            failed = fence.after(cycle, name, self.failure.text if self.failure else None)
            if not stopped and failed:
                rank, _why = failed[0]
                self.notes.append(f"stopped at cycle {cycle}, phase {name}: rank {rank} failed")
                stopped = True
        if stopped:
            raise _Stopped
        if name in OFFLOADS or name in LOADS:
            rec = self.measured_transfer(rec, grads_before, grad_device_bytes(self.model))
        self.phases.append(rec)
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(rec)
        return result

    def measured_transfer(self, rec: PhaseRecord, grads_before: int, grads_after: int) -> Any:
        """The phase's record with what it really moved (``engine.transfers``)."""
        if rec.phase in OFFLOADS:
            grads = max(0, grads_before - grads_after)
            if rec.phase == "offload":
                self.grads_freed = grads > 0
        else:
            grads = max(0, grads_after - grads_before)
        previous = self.phases[-1] if self.phases else None
        driver = driver_delta(self.strategy, previous, rec)
        rec, moved = measured_transfer(rec, grads, driver)
        if not moved:
            self.moved_nothing.add(rec.phase)
        return rec

    def audit(self, cycle: int) -> ResidencyFact:
        """After a cycle's offloads: the residency audit, and the cycle's residency facts."""
        released = confirmed_released(
            self.strategy, self.model.strategy_args("params"), self.phases
        )
        own = self.ledger.own
        self.residents = audit.audit(self.model, self.runtime, self.snapshot, released, own)
        left = audit.bytes_by_key(self.residents)
        hidden = self.ledger.after_offload(self.model)
        params_left, left_optimizer = left_numbers(left, self.model)
        self.optimizer_moved = max(0, self.optimizer_bytes - left_optimizer)
        index = max(i for i, p in enumerate(self.phases) if p.phase == "offload")
        self.phases[index] = replace(self.phases[index], left_on_device=left)
        fact = ResidencyFact(
            cycle=cycle,
            param_bytes_to_move=self.param_to_move,
            param_bytes_left=params_left,
            param_offload_gave_bytes=self.phases[index].bytes_moved,
            built_on_device_bytes=self.built_on_device,
            moves_optimizer=self.moves_optimizer,
            optimizer_state_bytes=self.optimizer_bytes,
            optimizer_moved_bytes=self.optimizer_moved,
            left_by_owner=left,
            **window_fields(
                self, hidden, param_to_move=self.param_to_move, moves_optimizer=self.moves_optimizer
            ),
        )
        self.residency.append(fact)
        return fact

    def moves(self, offload: bool) -> list[tuple[str, Callable[[], None]]]:
        """The cycle's parameter and optimizer moves, in the configured order."""
        verb = "offload" if offload else "load"
        params = getattr(self.strategy, verb)
        rt = self.runtime
        steps = [(verb, lambda: _within(rt, params, self.model.strategy_args("params")))]
        if self.moves_optimizer:
            optimizer = getattr(self.optimizer_strategy, verb)
            args = self.model.strategy_args("optimizer")
            step = (f"{verb} optimizer", lambda: _within(rt, optimizer, args))
            steps.insert(0 if self.cfg.optimizer_first else 1, step)
        return steps

    def check_step(self, label: str, index: int, got: Checkpoint) -> None:
        if self.reference:
            self.problems += differences(label, got, self.reference[index], self.model)

    def cycle(self, cycle: int) -> bool:
        """One cycle; True when the facts say the run cannot go on (not offloaded)."""
        cfg, model = self.cfg, self.model
        loss = self.phase(cycle, "train", lambda: model.train(cfg.train_steps))
        before = fingerprint_state(model)
        self.check_step(f"cycle {cycle} train step", cycle, Checkpoint.of(loss, before))
        window_start(self)
        for name, action in self.moves(offload=True):
            self.phase(cycle, name, action)
        stuck = bool(cycle_residency_problems(self.audit(cycle)))
        if cfg.rollout_claim_bytes:
            resident = device_bytes(model) if self.runtime.emulated else 0
            limit = cfg.gpu_limit_bytes

            def rollout() -> None:
                claim(self.runtime, cfg.rollout_claim_bytes, resident=resident, limit=limit)

            self.phase(cycle, "rollout", rollout)
        for name, action in self.moves(offload=False):
            self.phase(cycle, name, action)
        self.problems += verify_round_trip(model, before, cycle, grads_zeroed=self.grads_freed)
        return stuck

    def stops_here(self, cycle: int, stuck: bool) -> bool:
        """Whether the cycles end after ``cycle``: a corruption or a strategy that did not
        offload, on this rank or (over several ranks) on any, so all ranks stop together."""
        here = bool(self.problems) or stuck
        if (fence := self.hooks.fence) is None:
            return here
        failed = fence.failed_anywhere("stop" if here else None)
        if failed and not here:
            ranks = ", ".join(str(rank) for rank, _ in failed)
            self.notes.append(f"stopped after cycle {cycle}: rank {ranks} found a problem")
        return bool(failed)

    def run(self) -> None:
        try:
            if self.cfg.sequence:
                return run_sequence(self)
            for cycle in range(self.cfg.cycles):
                if self.stops_here(cycle, self.cycle(cycle)):
                    break
            else:
                if self.reference:
                    after = checkpoint(self.model, self.cfg.train_steps)
                    label = "train step after the last load"
                    want = self.reference[self.cfg.cycles]
                    self.problems += differences(label, after, want, self.model)
        except _Stopped:
            pass
        finally:
            self.close()

    def close(self) -> None:
        """The strategies' ``close`` hooks; one that raises is a crash in close (kept)."""
        with self.runtime.strategy_code():
            for strategy in (self.strategy, self.optimizer_strategy):
                self.registered += registered_bytes(strategy)
                try:
                    close(strategy)
                except Exception as exc:
                    if self.failure is None:
                        self.failure = phase_failure(exc, self.cfg.cycles - 1, "close")


def run_cycles(
    cfg: RunConfig,
    runtime: Runtime,
    hooks: Hooks | None = None,
    build_state: BuildState | None = None,
) -> RunRecord:
    """Build the training state (``build_state``: the engine's factory), then train,
    offload and load ``cfg.cycles`` times, measuring each phase."""
    cfg = without_reference(cfg, runtime)
    try:
        state = _Cycles(cfg, runtime, hooks or Hooks(), build_state)
    except UsageError:
        raise
    except Exception as exc:  # megatron or a strategy failed while building: a fact
        return failed_record(cfg, setup_failure(exc))
    state.run()
    return record_of(state, runtime)


def run(cfg: RunConfig, hooks: Hooks | None = None) -> Report:
    """One strategy's whole run in this process (one rank)."""
    with runtime_for(cfg) as runtime:
        record = run_cycles(cfg, runtime, hooks)
        return report_of(
            cfg, record, device=runtime.device, emulated=runtime.emulated, note=runtime.note
        )


__all__ = ["Hooks", "failed_record", "run", "run_cycles"]
