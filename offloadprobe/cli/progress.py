"""A progress bar on stderr, fed by the worker's phase log as its phases end."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from offloadprobe.core.config import RunConfig

PROGRESS_FLAGS = "--progress/--no-progress"
"""Every verb takes both, so one set of flags serves a script that calls several."""


def quiet_verb_help(verb: str) -> str:
    """``--no-progress``'s help on a verb that prints no progress."""
    return f"No effect: {verb} prints no progress (accepted as by every verb)."


def phases_per_run(cfg: RunConfig) -> int:
    """How many phases a run records: train, offload and load per cycle, a rollout where
    one is claimed, and the optimizer's own two where its strategy moves anything."""
    from offloadprobe.engine.optimizer.strategies import optimizer_strategy

    info = optimizer_strategy(cfg.optimizer_strategy)
    moves = info.moves(cfg.optimizer.precision_aware)
    if cfg.sequence:
        from offloadprobe.core.sequences import phase_count

        return phase_count(cfg.sequence, moves)
    return cfg.cycles * (3 + bool(cfg.rollout_claim_bytes) + 2 * moves)


@contextlib.contextmanager
def phase_progress(
    label: str, cfg: RunConfig, *, show: bool
) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """A callback for phase-log events that advances a transient bar (None if not shown)."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=sys.stderr)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"{label}: building model", total=phases_per_run(cfg))

        def on_phase(event: dict[str, Any]) -> None:
            words = f"{label}: cycle {event.get('cycle')} {event.get('phase')}"
            if event.get("event") == "end":
                bar.update(task, advance=1, description=words)
            else:
                bar.update(task, description=words)

        yield on_phase
