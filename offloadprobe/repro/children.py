"""What the repro's child processes share: their flags, and the gate a parent holds them at."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offloadprobe.core.config import ModelConfig, RunConfig
from offloadprobe.core.records import RunRecord
from offloadprobe.isolation.child import ChildOutcome
from offloadprobe.measure.phase_log import last_started


def base_config(model: ModelConfig, *, device: str, cycles: int, train_steps: int) -> RunConfig:
    """The configuration every child of one repro shares (strategies filled in per child)."""
    return RunConfig(
        model=model,
        device=device,
        cycles=cycles,
        train_steps=train_steps,
        reference_check=False,
    )


class GateKeeper(threading.Thread):
    """Serves a gated child's pauses: for each ``ready-N``, runs ``on_event``, writes ``go-N``.

    ``on_event`` gets the pause's ``{"event", "cycle", "phase"}`` while the child waits
    (see ``offloadprobe.measure.phase_log``); errors are kept, and the child is let go anyway.
    """

    def __init__(
        self, directory: Path, on_event: Callable[[dict[str, Any]], None], poll_s: float = 0.002
    ) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.on_event = on_event
        self.poll_s = poll_s
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self._stop_event.wait(self.poll_s):
            ready = self.directory / f"ready-{seq}"
            if not ready.exists():
                continue
            info = json.loads(ready.read_text())
            self.events.append(info)
            try:
                self.on_event(info)
            except Exception as exc:  # reported in the outcome, never a crash
                self.errors.append(f"cycle {info.get('cycle')} {info.get('phase')}: {exc}")
            finally:
                (self.directory / f"go-{seq}").touch()
            seq += 1

    @property
    def reached(self) -> bool:
        return bool(self.events)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def killed_at(log: Path) -> tuple[int | None, str | None]:
    """The cycle and phase a killed child was in, from its phase log."""
    where = last_started(log)
    return (where[0], where[1]) if where else (None, None)


def child_run(outcome: ChildOutcome) -> RunRecord | None:
    """The child's run record, if it wrote its JSON."""
    try:
        return outcome.run
    except (KeyError, TypeError, ValueError):
        return None
