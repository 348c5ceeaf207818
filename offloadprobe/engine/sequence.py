"""Run a phase sequence (``--sequence``, ``core.sequences``): the steps and their checks.

Each step is one phase or a part's moves, measured as any phase is (``PhaseRecord.cycle``
is the step's number). The checks, each naming the step it blames:

- every ``train`` step against the no-offload reference (loss, parameter and optimizer
  state bytes), and a train step after the last step where every part ends on the device;
- a load that brings every part back: the keyed fingerprints of every DDP buffer and
  optimizer tensor against the state the model had when it was last on the device;
- a load of what is already on the device, anywhere: the fingerprints just before it
  against just after it (it must be a no-op);
- after each offload step: the residency audit and the device ledger, as after a cycle's
  offloads (what the offloads since the model was last on the device gave back).

Blame: a check after a load covers every move since the model was last on the device
(the window); the step it names is the first unusual one in the window (an offload of
what was offloaded, a load of what was loaded), since the window without it is the plain
round trip, checked in the same run; with no unusual step, the load. The step where the
check found it is said too: ``after step 6, offload (second in a row) (found by the load
at step 7)``.

``StepHost`` is what the steps run on: the runner's state in a measured run
(``engine.runner``), a bare stand-in where only the strategies' handling of the steps
is in question (the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from offloadprobe.core.config import RunConfig
from offloadprobe.core.records import ResidencyFact
from offloadprobe.core.sequences import OPTIMIZER, PARAMS, Step, steps_of, train_phases
from offloadprobe.core.units import gbps
from offloadprobe.core.verdicts import cycle_residency_problems
from offloadprobe.engine.checkpoint import save_and_remove
from offloadprobe.engine.model import audit
from offloadprobe.engine.model.integrity import Fingerprints, fingerprint_state, verify_round_trip
from offloadprobe.engine.model.reference import Checkpoint, checkpoint, differences
from offloadprobe.engine.model.residency import device_bytes
from offloadprobe.engine.offload_window import left_numbers, window_fields, window_start
from offloadprobe.engine.rollout import claim
from offloadprobe.engine.transfers import confirmed_released


class StepHost(Protocol):
    """What a sequence runs on: the model, its strategies' moves, and each step's phase."""

    model: Any
    problems: list[str]
    grads_freed: bool
    """Whether the last parameter offload phase freed ``grad_data``."""

    def phase(self, cycle: int, name: str, action: Callable[[], Any]) -> Any: ...

    def moves(self, offload: bool) -> list[tuple[str, Callable[[], None]]]: ...


def _part(move: str) -> str:
    return OPTIMIZER if move.endswith("optimizer") else PARAMS


class Steps:
    """One sequence over one host: runs each step, checks what it must, says what broke."""

    def __init__(
        self,
        host: StepHost,
        names: Sequence[str],
        *,
        train: Callable[[Step], float | None],
        on_window: Callable[[], None] = lambda: None,
        on_offloaded: Callable[[Step, int], bool] = lambda step, since: False,
        on_train: Callable[[Step, int, Checkpoint], None] = lambda step, index, got: None,
        other: Callable[[Step], None] = lambda step: None,
        stops_here: Callable[[int, bool], bool] | None = None,
    ) -> None:
        self.host, self.steps = host, steps_of(names)
        self.train, self.on_window, self.on_offloaded = train, on_window, on_offloaded
        self.on_train, self.other = on_train, other
        self.stops_here = stops_here or (lambda number, stuck: bool(host.problems) or stuck)
        self.loaded = {PARAMS: True, OPTIMIZER: True}
        self.expected: Fingerprints | None = None
        """The state the model had when it was last on the device (trained or checked);
        taken at the first offload where no train step came before."""
        self.window: list[Step] = []
        """The moves since every part was last on the device."""
        self.window_grads = False
        """Whether a parameter offload in the window freed ``grad_data``."""
        self.since = 0
        """The host's phase count when the window began."""
        self.trains = 0

    @property
    def on_device(self) -> bool:
        return all(self.loaded.values())

    def run(self) -> bool:
        """Every step in order; False when one stopped the sequence (a check failed, the
        strategy did not offload, or a phase failed: the host's phase raises then)."""
        for step in self.steps:
            stuck = self.step(step)
            if self.stops_here(step.number, stuck):
                return False
        return True

    def step(self, step: Step) -> bool:
        """One step; True when the facts say the run cannot go on (not offloaded)."""
        if step.name == "train":
            loss = self.train(step)
            self.expected = fingerprint_state(self.host.model)
            self.on_train(step, self.trains, Checkpoint.of(loss, self.expected))
            self.trains += 1
            return False
        if step.verb is None:
            self.other(step)
            return False
        offload = step.verb == "offload"
        actions = [(n, a) for n, a in self.host.moves(offload) if _part(n) in step.parts]
        if offload:
            return self.offload(step, actions)
        self.load(step, actions)
        return False

    def offload(self, step: Step, actions: list[tuple[str, Callable[[], None]]]) -> bool:
        if self.on_device:
            self.window, self.window_grads = [], False
            self.since = len(getattr(self.host, "phases", ()))
            if self.expected is None:
                self.expected = fingerprint_state(self.host.model)
            self.on_window()
        for name, action in actions:
            self.host.phase(step.number, name, action)
            if name == "offload":
                self.window_grads |= self.host.grads_freed
        for part in step.parts:
            self.loaded[part] = False
        self.window.append(step)
        return bool(actions) and self.on_offloaded(step, self.since)

    def load(self, step: Step, actions: list[tuple[str, Callable[[], None]]]) -> None:
        before = fingerprint_state(self.host.model) if self.on_device else None
        for name, action in actions:
            self.host.phase(step.number, name, action)
        for part in step.parts:
            self.loaded[part] = True
        if not self.on_device:
            self.window.append(step)
            return
        if before is not None:  # a load of what was on the device: a no-op, or broken
            found = verify_round_trip(self.host.model, before, step.number, grads_zeroed=False)
            self.blame(step, [step], found)
            return
        window, self.window = [*self.window, step], []
        assert self.expected is not None  # taken when the window began
        found = verify_round_trip(
            self.host.model, self.expected, step.number, grads_zeroed=self.window_grads
        )
        self.blame(step, window, found)

    def blame(self, found_at: Step, window: list[Step], problems: list[str]) -> None:
        if not problems:
            return
        culprit = next((s for s in window if s.unusual), found_at)
        where = f"after {culprit.label}"
        if culprit is not found_at:
            where += f" (found by the {found_at.name} at step {found_at.number})"
        elif len(window) > 1:
            where += f" (the round trip since step {window[0].number})"
        for line in problems:  # the check's own "cycle N" is the step, named already
            for lead in (f"cycle {found_at.number}, ", f"cycle {found_at.number}: "):
                line = line.removeprefix(lead)
            self.host.problems.append(f"{where}: {line}")


def reference_phases(cfg: RunConfig) -> int:
    """Train phases the no-offload reference needs for this run."""
    return train_phases(cfg.sequence, cfg.cycles)


def run_sequence(state: Any) -> None:
    """Run ``state.cfg.sequence`` on a runner's state (``engine.runner._Cycles``): every
    phase measured, every check made; a phase failure raises the runner's stop."""
    cfg, model = state.cfg, state.model

    def train(step: Step) -> float | None:
        def steps() -> float | None:
            return model.train(cfg.train_steps)

        return state.phase(step.number, "train", steps)

    def on_train(step: Step, index: int, got: Checkpoint) -> None:
        state.check_step(f"after {step.label}", index, got)

    def on_window() -> None:
        window_start(state)

    def other(step: Step) -> None:
        if step.name == "rollout":
            resident = device_bytes(model) if state.runtime.emulated else 0
            nbytes, limit = cfg.rollout_claim_bytes, cfg.gpu_limit_bytes

            def rollout() -> None:
                if nbytes:
                    claim(state.runtime, nbytes, resident=resident, limit=limit)

            state.phase(step.number, "rollout", rollout)
        elif step.name == "checkpoint":
            written = state.phase(step.number, "checkpoint", lambda: save_and_remove(model))
            rec = state.phases[-1]
            state.phases[-1] = replace(rec, bytes_moved=written, gbps=gbps(written, rec.seconds))

    steps = Steps(
        state,
        cfg.sequence,
        train=train,
        on_window=on_window,
        on_offloaded=lambda step, since: _audit(state, steps, step, since),
        on_train=on_train,
        other=other,
        stops_here=state.stops_here,
    )
    try:
        completed = steps.run()
    except Exception:
        _name_the_step(state, steps)
        raise
    if completed and steps.on_device and state.reference:
        after = checkpoint(model, cfg.train_steps)
        label = "train step after the last step"
        state.problems += differences(label, after, state.reference[steps.trains], model)
    elif completed and not steps.on_device:
        state.notes.append("the sequence ends with a part offloaded: no train step after it")
    # a move that repeats its part's state moves nothing by design: no note for it
    usual = {s.number for s in steps.steps if not s.unusual}
    state.moved_nothing = {p for p in state.moved_nothing if _moved_nothing_in(state, p, usual)}


def _moved_nothing_in(state: Any, phase: str, numbers: set[int]) -> bool:
    return any(p.phase == phase and not p.bytes_moved and p.cycle in numbers for p in state.phases)


def _name_the_step(state: Any, steps: Steps) -> None:
    """A phase failed: its record names the step, as a verdict on a check would."""
    failure = state.failure
    if failure is None or failure.cycle is None:
        return
    step = steps.steps[failure.cycle - 1]
    state.failure = replace(failure, message=f"at {step.label}: {failure.message}")


def _audit(state: Any, steps: Steps, step: Step, since: int) -> bool:
    """After an offload step: the residency audit and the ledger over the window's moves
    (what every offload since the model was last on the device gave back); True when the
    run cannot go on (``cycle_residency_problems``)."""
    model = state.model
    released = confirmed_released(state.strategy, model.strategy_args("params"), state.phases)
    own = state.ledger.own
    state.residents = audit.audit(model, state.runtime, state.snapshot, released, own)
    left = audit.bytes_by_key(state.residents)
    hidden = state.ledger.after_offload(model)
    params_left, left_optimizer = left_numbers(left, model)
    moves_optimizer = state.moves_optimizer and not steps.loaded[OPTIMIZER]
    if moves_optimizer:
        state.optimizer_moved = max(0, state.optimizer_bytes - left_optimizer)
    param_to_move = state.param_to_move if not steps.loaded[PARAMS] else 0
    window = state.phases[since:]
    index = max(i for i, p in enumerate(state.phases) if p.cycle == step.number)
    state.phases[index] = replace(state.phases[index], left_on_device=left)
    fact = ResidencyFact(
        cycle=step.number,
        param_bytes_to_move=param_to_move,
        param_bytes_left=params_left if param_to_move else 0,
        param_offload_gave_bytes=sum(p.bytes_moved for p in window if p.phase == "offload"),
        built_on_device_bytes=state.built_on_device,
        moves_optimizer=moves_optimizer,
        optimizer_state_bytes=state.optimizer_bytes,
        optimizer_moved_bytes=state.optimizer_moved if moves_optimizer else 0,
        left_by_owner=left,
        **window_fields(
            state, hidden, param_to_move=param_to_move, moves_optimizer=moves_optimizer
        ),
    )
    state.residency.append(fact)
    return bool(cycle_residency_problems(fact))


__all__ = ["StepHost", "Steps", "reference_phases", "run_sequence"]
