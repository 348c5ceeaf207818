"""A line-per-event log of phases, written as they happen.

A parent reads it after its child was killed (an OOM kill leaves no JSON) to
learn in which cycle and phase the child died.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


class PhaseLog:
    """Appends ``{"event": "start"|"end", "cycle": k, "phase": p}`` lines, flushed each time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.write_text("")

    def _write(self, event: str, cycle: int, phase: str) -> None:
        line = json.dumps({"event": event, "cycle": cycle, "phase": phase, "t": time.time()})
        with self.path.open("a") as fh:
            fh.write(line + "\n")

    def start(self, cycle: int, phase: str) -> None:
        self._write("start", cycle, phase)

    def end(self, cycle: int, phase: str) -> None:
        self._write("end", cycle, phase)


def last_started(path: Path) -> tuple[int, str] | None:
    """The phase that had started but not ended when the log stopped, if any."""
    open_phase = None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        entry = json.loads(line)
        key = (entry["cycle"], entry["phase"])
        open_phase = key if entry["event"] == "start" else None
    return open_phase
