"""The zero of a run's host figures, before any strategy code runs, and the framework's own
growth until the first offload, measured on a run without strategies.

Every host figure is over the host before the strategies' modules were imported and the
strategies built (the construction phase's start; a built-in strategy's module, the
tool's own code, is imported before it): what they hold from then on counts.
Between that and the first offload come the train phases before it, and strategy code
can run in them (a forward hook, an optimizer step hook, a thread): what they grow the
host by counts too, less what the framework's own train phases grow it by. That part is
measured, never assumed, on the same model trained without strategies in the same
process, phase for phase: the no-offload reference where the reference check runs; where
it does not, a model of its own (built, trained, freed), once per configuration and
process (a later run of it takes that measurement); and nothing where no train step
comes before the first offload (no framework code runs there).

Like for like. The offloaded run's first train phase is a freshly built model's first, in
a process where a model of the same configuration trained before (the no-strategy run)
and whose heap was trimmed since (``Runtime.release``). The first train phase a process
ever runs grows the host by much more (lazy imports and inits, first kernels: about
20 MiB in CPU emulation), and a model's second train phase by less than its first (the
optimizer's state, a step's activations regrowing the heap: 2 to 5 MiB at 130 MB of
parameters in CPU emulation). So the measured model is a fresh one too, in a process
that is warm for its configuration: where none of that configuration trained in this
process yet, a model is built, trained one step and freed first (``warm_up``). The
judgement of the two figures is ``core.host_zero``'s.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from offloadprobe.core.config import RunConfig
from offloadprobe.core.sequences import steps_of
from offloadprobe.engine.model.reference import Trajectory, reference_trajectory, train_phase
from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES, optimizer_strategy
from offloadprobe.engine.sequence import reference_phases
from offloadprobe.engine.strategies import MODEL_STRATEGIES, model_strategy
from offloadprobe.measure.meter import PhaseMeter

_WARM: set[str] = set()
"""The configurations a model has trained with in this process (this process's own:
a forked worker starts with none)."""
_MEASURED: dict[str, list[int]] = {}
"""The framework's growth last measured in this process, by configuration: a run without
the reference check takes it from here where a run of its configuration measured it."""


def trains_before_first_offload(cfg: RunConfig) -> int:
    """Train phases a run has before its first offload (0 with no train step in them)."""
    if not cfg.train_steps:
        return 0
    if not cfg.sequence:
        return 1
    count = 0
    for step in steps_of(cfg.sequence):
        if step.verb == "offload":
            break
        count += step.name == "train"
    return count


def import_builtins(cfg: RunConfig) -> None:
    """Import the run's built-in strategy modules (offloadprobe's own code) before the zero
    is taken; a user's or a third party's module is imported in the construction phase,
    where what its import-time code holds is measured as the strategy's."""
    if cfg.strategy in MODEL_STRATEGIES.builtin_names():
        model_strategy(cfg.strategy)
    if cfg.optimizer_strategy in OPTIMIZER_STRATEGIES.builtin_names():
        optimizer_strategy(cfg.optimizer_strategy)


def _key(cfg: RunConfig) -> str:
    return repr((cfg.model, cfg.optimizer, cfg.parallel, cfg.device))


def warm_up(cfg: RunConfig, build: Callable[[], Any], release: Callable[[], None]) -> bool:
    """Make the process warm for ``cfg``'s model: build one, train it one step, free it,
    unless one of that configuration trained here before; True when it had to."""
    key = _key(cfg)
    if key in _WARM:
        return False
    model = build()
    train_phase(model, 1)
    del model
    gc.collect()
    release()
    _WARM.add(key)
    return True


def _growth(meter: PhaseMeter) -> Callable[[Callable[[], Any]], tuple[int, Any]]:
    """Runs an action measured as a phase (not marked on the timeline: no phase of the
    run), returns its host growth and its result."""

    def measure(action: Callable[[], Any]) -> tuple[int, Any]:
        rec, result = meter.measure(0, "train", action, mark=False)
        return rec.host.host_rss_after - rec.host.host_rss_before, result

    return measure


def no_strategy_run(
    cfg: RunConfig, build: Callable[[], Any], release: Callable[[], None], meter: PhaseMeter
) -> Trajectory:
    """The run without strategies before the offloaded one: the reference's checkpoints
    where the check runs, and the measured host growth of the train phases before the
    first offload (``Trajectory.growth``: empty where there are none). Without the check,
    the growth a run of the same configuration measured in this process stands, where one
    did (the same model, fresh, in a process warm for it); else a model is trained for it."""
    before = trains_before_first_offload(cfg)
    key = f"{_key(cfg)} steps={cfg.train_steps}"
    known = _MEASURED.get(key, [])
    if not cfg.reference_check and (not before or len(known) >= before):
        return Trajectory(points=[], growth=known[:before])
    if before:
        warm_up(cfg, build, release)
    run = reference_trajectory(
        build,
        cfg.train_steps,
        reference_phases(cfg),
        release,
        measure=_growth(meter),
        growth_phases=before,
        checkpoints=cfg.reference_check,
    )
    if before:
        _MEASURED[key] = run.growth
    return run


__all__ = ["import_builtins", "no_strategy_run", "trains_before_first_offload", "warm_up"]
