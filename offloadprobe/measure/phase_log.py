"""A line-per-event log of phases, written as they happen.

A parent reads it after its child was killed (an OOM kill leaves no JSON) to
learn in which cycle and phase the child died.

With a gate directory (the job's ``gate``), the child also pauses at the start
of every offload phase and at the end of every load phase: it writes ``ready-N`` there
(its event, cycle and phase) and waits until ``go-N`` appears. ``offloadprobe repro``
uses the pauses to read the child's memory just before its first offload and to hold
a cgroup limit exactly around the offload/load phases, which are what the limit is for.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

GATES = frozenset({("start", "offload"), ("end", "load")})
"""Where a gated child pauses: before every offload and after every load."""
GATE_TIMEOUT_S = 600.0


class PhaseLog:
    """Appends ``{"event": "start"|"end", "cycle": k, "phase": p}`` lines, flushed each time."""

    def __init__(self, path: Path, gate: Path | None = None) -> None:
        """``gate``: pause there (several ranks: rank 0's log alone has one; the others wait
        for it at the phase fence)."""
        self.path = path
        self.path.write_text("")
        self.gate = gate
        if gate is not None:
            gate.mkdir(parents=True, exist_ok=True)
        self._gates_passed = 0

    def _write(self, event: str, cycle: int, phase: str, record: dict | None = None) -> None:
        entry = {"event": event, "cycle": cycle, "phase": phase, "t": time.time()}
        if record is not None:
            entry["record"] = record
        line = json.dumps(entry)
        with self.path.open("a") as fh:
            fh.write(line + "\n")

    def _pause(self, event: str, cycle: int, phase: str) -> None:
        if self.gate is not None and (event, phase) in GATES:
            info = {"event": event, "cycle": cycle, "phase": phase, "pid": os.getpid()}
            wait_at_gate(self.gate, self._gates_passed, info)
            self._gates_passed += 1

    def start(self, cycle: int, phase: str) -> None:
        self._write("start", cycle, phase)
        self._pause("start", cycle, phase)

    def end(self, cycle: int, phase: str, record: dict | None = None) -> None:
        """A phase ended; ``record`` is its ``PhaseRecord`` as a dict, so that a parent
        keeps every phase a worker measured even if the worker never writes its result."""
        self._write("end", cycle, phase, record)
        self._pause("end", cycle, phase)


def wait_at_gate(
    gate: Path,
    seq: int,
    info: dict,
    *,
    timeout_s: float = GATE_TIMEOUT_S,
    poll_s: float = 0.002,
) -> bool:
    """Announce ``ready-<seq>`` in ``gate`` and wait for ``go-<seq>``; False if it never came."""
    tmp = gate / f"ready-{seq}.tmp"
    tmp.write_text(json.dumps(info))
    tmp.replace(gate / f"ready-{seq}")
    deadline = time.monotonic() + timeout_s
    while not (gate / f"go-{seq}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def recorded_phases(path: Path) -> list[dict]:
    """Every phase record the log holds (each ended phase's), in order."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the last line of a killed writer may be cut short
        if entry.get("record") is not None:
            found.append(entry["record"])
    return found


def last_started(path: Path) -> tuple[int, str] | None:
    """The phase that had started but not ended when the log stopped, if any."""
    open_phase = None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        key = (entry["cycle"], entry["phase"])
        open_phase = key if entry["event"] == "start" else None
    return open_phase
