"""Run each strategy in a fresh process, so no allocator cache carries over.

PyTorch's pinned allocator keeps freed blocks for the life of the process, so
strategies measured one after another in one process contaminate each other. A
child that crashes or is killed becomes an outcome with a verdict, never a crash
of the parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offloadprobe.core.records import RunRecord, report_from_dict
from offloadprobe.measure.probes.cgroup import locate


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildSpec:
    """One child run: its label, its ``offloadprobe run`` arguments and environment."""

    label: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    cgroup_procs: Path | None = None
    """A ``cgroup.procs`` file the child joins before it starts (memory limits)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildOutcome:
    """What one child produced: a report, or a verdict on how it died."""

    label: str
    exit_code: int
    verdict: str
    """``ok``, ``integrity failure: ...``, ``killed by SIGKILL: out of memory``..."""
    report: dict[str, Any] | None
    stderr_tail: str

    @property
    def run(self) -> RunRecord | None:
        if self.report is None or not self.report.get("runs"):
            return None
        return report_from_dict(self.report).runs[0]


def alloc_conf_env(conf: str | None) -> dict[str, str]:
    """PyTorch allocator settings for a child: both variable names torch has used."""
    if not conf:
        return {}
    return {"PYTORCH_ALLOC_CONF": conf, "PYTORCH_CUDA_ALLOC_CONF": conf}


def _oom_kills() -> int | None:
    """The memory cgroup's OOM-kill counter (v2 memory.events, v1 memory.oom_control)."""
    files = locate()
    if files is None:
        return None
    base = files.current.parent
    for name in ("memory.events", "memory.oom_control"):
        try:
            for line in (base / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def _signal_verdict(signum: int, oom_before: int | None) -> str:
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum
    oom_after = _oom_kills()
    if signum == signal.SIGKILL and oom_before is not None and oom_after is not None:
        if oom_after > oom_before:
            return f"killed by {name}: out of memory (cgroup oom_kill {oom_before} -> {oom_after})"
        return f"killed by {name} (no OOM kill recorded by the cgroup)"
    if signum == signal.SIGKILL:
        return f"killed by {name}: probably out of memory (no cgroup counter to confirm)"
    return f"killed by {name}"


def _joiner(procs: Path | None):
    if procs is None:
        return None

    def join() -> None:
        procs.write_text(str(os.getpid()))

    return join


def run_child(spec: ChildSpec, *, python: str = sys.executable) -> ChildOutcome:
    """Run ``offloadprobe run`` in a fresh interpreter and collect its JSON report."""
    with tempfile.TemporaryDirectory(prefix="offloadprobe-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [python, "-m", "offloadprobe", "run", *spec.args, "--json", str(out)]
        cmd.append("--no-progress")
        env = {**os.environ, **spec.env}
        oom_before = _oom_kills()
        try:
            proc = subprocess.run(
                cmd,
                env=env,
                capture_output=True,
                text=True,
                timeout=spec.timeout_s,
                preexec_fn=_joiner(spec.cgroup_procs),
            )
        except subprocess.TimeoutExpired:
            return ChildOutcome(
                label=spec.label,
                exit_code=124,
                verdict=f"timed out after {spec.timeout_s:g} s",
                report=None,
                stderr_tail="",
            )
        report = json.loads(out.read_text()) if out.exists() else None
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        if proc.returncode < 0:
            verdict = _signal_verdict(-proc.returncode, oom_before)
        elif proc.returncode == 0:
            verdict = "ok"
        else:
            last = tail.splitlines()[-1] if tail else f"exit code {proc.returncode}"
            verdict = last.removeprefix("offloadprobe: error: ")
        return ChildOutcome(
            label=spec.label,
            exit_code=proc.returncode,
            verdict=verdict,
            report=report,
            stderr_tail=tail,
        )
