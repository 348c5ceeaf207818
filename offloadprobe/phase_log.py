"""A line-per-event log of phases, written as they happen.

A parent reads it after its child was killed (an OOM kill leaves no JSON) to
learn in which cycle and phase the child died.

With ``OFFLOADPROBE_PHASE_GATE`` set to a directory, the child also stops at the start
of its first offload phase: it writes ``ready`` there and waits until ``go`` appears.
``offloadprobe repro`` uses that pause to read the child's memory just before the
offload and set its cgroup limit to that baseline plus the scaled budget.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

GATE_ENV = "OFFLOADPROBE_PHASE_GATE"
GATE_PHASE = (0, "offload")
"""Where a gated child waits: the start of cycle 0's offload."""
GATE_TIMEOUT_S = 600.0


class PhaseLog:
    """Appends ``{"event": "start"|"end", "cycle": k, "phase": p}`` lines, flushed each time."""

    def __init__(self, path: Path, gate: Path | None = None) -> None:
        self.path = path
        self.path.write_text("")
        env_gate = os.environ.get(GATE_ENV)
        self.gate = gate if gate is not None else (Path(env_gate) if env_gate else None)

    def _write(self, event: str, cycle: int, phase: str) -> None:
        line = json.dumps({"event": event, "cycle": cycle, "phase": phase, "t": time.time()})
        with self.path.open("a") as fh:
            fh.write(line + "\n")

    def start(self, cycle: int, phase: str) -> None:
        self._write("start", cycle, phase)
        if self.gate is not None and (cycle, phase) == GATE_PHASE:
            wait_at_gate(self.gate, cycle, phase)

    def end(self, cycle: int, phase: str) -> None:
        self._write("end", cycle, phase)


def wait_at_gate(
    gate: Path, cycle: int, phase: str, *, timeout_s: float = GATE_TIMEOUT_S, poll_s: float = 0.002
) -> bool:
    """Announce ``ready`` in ``gate`` and wait for ``go``; False if it never came."""
    ready = gate / "ready"
    tmp = gate / "ready.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), "cycle": cycle, "phase": phase}))
    tmp.replace(ready)
    deadline = time.monotonic() + timeout_s
    while not (gate / "go").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


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
