"""What the repro's child processes share: their flags, and the gate a parent holds them at."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offloadprobe.comparison import model_args
from offloadprobe.config import ModelConfig
from offloadprobe.isolation import ChildOutcome
from offloadprobe.phase_log import last_started
from offloadprobe.records import RunRecord

STATE_DTYPE_FLAGS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "uint8"}
"""Scenario dtype names -> ``run --exp-avg-dtype`` values (uint8 holds FP8 E4M3 + a scale)."""


def run_args(model: ModelConfig, *, device: str, cycles: int, train_steps: int) -> list[str]:
    """``offloadprobe run`` flags every child of one repro shares."""
    return [
        *model_args(model),
        "--device", device,
        "--cycles", str(cycles),
        "--train-steps", str(train_steps),
        "--no-reference-check",
    ]  # fmt: skip


class GateKeeper(threading.Thread):
    """Waits for a gated child's ``ready``, runs ``on_ready``, then lets the child go.

    ``on_ready`` runs while the child sits at the start of its first offload (see
    ``offloadprobe.phase_log``); its result or exception is kept.
    """

    def __init__(self, directory: Path, on_ready: Callable[[], Any], poll_s: float = 0.002):
        super().__init__(daemon=True)
        self.directory = directory
        self.on_ready = on_ready
        self.poll_s = poll_s
        self.reached = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        ready = self.directory / "ready"
        while not self._stop_event.wait(self.poll_s):
            if ready.exists():
                self.reached = True
                try:
                    self.result = self.on_ready()
                except Exception as exc:  # reported as the outcome, never a crash
                    self.error = exc
                finally:
                    (self.directory / "go").touch()
                return

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
