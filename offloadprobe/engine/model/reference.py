"""The no-offload reference: the same seed trained without any offload, step for step.

After each train phase (the first, and each after a load), the offloaded run must hold
what a model that never left the device holds: the same loss, the same bytes in every DDP
buffer and every parameter outside them, and the same bytes in every optimizer tensor
(``exp_avg``, ``exp_avg_sq``, master params, ``step``: all that ``integrity`` fingerprints)
with the same param-group values. Optimizer state that was lost, reordered or left
half-moved shows up as a different update; state that diverged where the batch does not
reach yet (a moment set to +inf in an unread embedding row changes no parameter: Adam's
update there is ``0 / inf``) shows up here, by its bytes, and a tensor that holds
non-finite values is said to.

The same run measures the framework's own host growth in its first train phases
(:class:`Trajectory`): the offloaded run's host figures leave out no more than that
(``engine.zero``).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.engine.model.integrity import (
    Fingerprints,
    HeldName,
    fingerprint_state,
    nonfinite_of,
    nonfinite_words,
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a train phase produced: its last loss and the fingerprints of every param
    buffer, every parameter outside them, every optimizer tensor and param-group value."""

    loss: float | None
    fingerprints: list[tuple[int, ...]]
    optimizer: list[tuple[HeldName, tuple[int, ...]]] = field(default_factory=list)
    groups: list[tuple[str, Any]] = field(default_factory=list)
    parts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)

    @classmethod
    def of(cls, loss: float | None, state: Fingerprints) -> Checkpoint:
        return cls(
            loss=loss,
            fingerprints=state.buffers,
            optimizer=state.optimizer,
            groups=state.groups,
            parts=state.parts,
        )


def train_phase(model: Any, steps: int) -> float | None:
    """``steps`` train steps of the training state (``engine_state``); the last loss (None
    for none)."""
    return model.train(steps)


def checkpoint(model: Any, steps: int) -> Checkpoint:
    """Train ``steps`` steps and fingerprint the parameters and the optimizer state."""
    return Checkpoint.of(train_phase(model, steps), fingerprint_state(model))


Measure = Callable[[Callable[[], Any]], tuple[int, Any]]
"""Runs an action as a measured phase: (its host growth in bytes, the action's result)."""


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A run without strategies: its checkpoints (the reference) and its measured growth."""

    points: list[Checkpoint]
    """One per train phase, when the reference check is on (empty otherwise)."""
    growth: list[int]
    """Host growth of its first train phases, as many as were asked for."""


def reference_trajectory(
    build: Callable[[], Any],
    steps: int,
    phases: int,
    release: Callable[[], None],
    *,
    measure: Measure | None = None,
    growth_phases: int = 0,
    checkpoints: bool = True,
) -> Trajectory:
    """Build a model, run train phases of ``steps`` steps, free it again: ``phases``
    checkpoints when ``checkpoints``, and with ``measure`` the host growth of the first
    ``growth_phases`` train phases (as many run at least)."""
    model = build()
    points: list[Checkpoint] = []
    growth: list[int] = []
    for index in range(max(phases if checkpoints else 0, growth_phases)):
        if measure is not None and index < growth_phases:
            grew, loss = measure(functools.partial(train_phase, model, steps))
            growth.append(grew)
        else:
            loss = train_phase(model, steps)
        if checkpoints and index < phases:
            points.append(Checkpoint.of(loss, fingerprint_state(model)))
    del model
    gc.collect()
    release()
    return Trajectory(points=points, growth=growth)


def differences(label: str, got: Checkpoint, want: Checkpoint, model: Any = None) -> list[str]:
    """Lines describing how a train phase differs from the reference (empty: identical).
    ``model``: the offloaded run's, whose optimizer tensors found changed are read for
    non-finite values."""
    problems = []
    if got.loss != want.loss:
        problems.append(
            f"{label}: loss {got.loss!r} differs from the no-offload run's {want.loss!r}"
        )
    if got.fingerprints != want.fingerprints:
        problems.append(f"{label}: parameters differ from the no-offload run's after the step")
    wanted_parts = dict(want.parts)
    problems += [
        f"{label}: {name} differs from the no-offload run's after the step"
        for name, fp in got.parts
        if name in wanted_parts and wanted_parts[name] != fp
    ]
    return problems + _optimizer_differences(label, got, want, model)


def _by_owner(names: list[HeldName]) -> dict[str, list[HeldName]]:
    grouped: dict[str, list[HeldName]] = {}
    for name in names:
        grouped.setdefault(name.owner, []).append(name)
    return grouped


def _listed(names: list[HeldName], shown: int = 3) -> str:
    if len(names) == 1:
        return names[0].param + (f" ({names[0].label})" if names[0].label else "")
    listed = ", ".join(n.param.removeprefix("param ") for n in names[:shown])
    return f"params {listed}" + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _an_object(value: Any) -> bool:
    """A param-group value shown by its address (``<... object at 0x...>``): an object of
    each process's own, the same only within a run (the round trip compares it there)."""
    return isinstance(value, str) and " at 0x" in value


def _optimizer_differences(label: str, got: Checkpoint, want: Checkpoint, model: Any) -> list[str]:
    """Every optimizer tensor by name against the reference's: missing, extra, changed
    (saying how many non-finite values it holds), then each param group's values."""
    at = f"{label}: optimizer"
    wanted = {name.key: fp for name, fp in want.optimizer}
    have = {name.key for name, _ in got.optimizer}
    problems = [
        f"{at} {owner} of {_listed(names)} missing (the no-offload run's has it)"
        for owner, names in _by_owner([n for n, _ in want.optimizer if n.key not in have]).items()
    ]
    extra = [name for name, _ in got.optimizer if name.key not in wanted]
    problems += [
        f"{at} {owner} of {_listed(names)} is not in the no-offload run's"
        for owner, names in _by_owner(extra).items()
    ]
    changed = [name for name, fp in got.optimizer if name.key in wanted and wanted[name.key] != fp]
    found = nonfinite_of(changed, model=model) if changed and model is not None else {}
    problems += [
        f"{at} {owner} differs from the no-offload run's in {len(names)} tensor(s): "
        f"{_listed(names)}" + nonfinite_words(owner, found)
        for owner, names in _by_owner(changed).items()
    ]
    groups = dict(want.groups)
    for name, value in got.groups:
        if name in groups and groups[name] != value and not _an_object(value):
            shown = "a tensor" if isinstance(value, tuple) else f"{groups[name]} -> {value}"
            problems.append(f"{label}: {name} differs from the no-offload run's ({shown})")
    return problems
