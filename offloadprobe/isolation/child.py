"""Run ``offloadprobe run`` in a fresh process: the one way every verb runs a child.

PyTorch's pinned allocator keeps freed blocks for the life of the process, so strategies
measured one after another in one process contaminate each other. The child reads its
whole configuration from one JSON file (:meth:`RunConfig.to_dict`), writes its report
as JSON, and, when it fails, a structured error record (``ERROR_FILE_ENV``); a phase log
places a kill in its cycle and phase. A child that crashes or is killed becomes an
outcome with a typed :class:`ChildFailure`, never a crash of the parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offloadprobe.core import collector
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import ERROR_FILE_ENV
from offloadprobe.core.records import ChildFailure, RunRecord, report_from_dict
from offloadprobe.measure.memory_cgroup import kill_node_group
from offloadprobe.measure.phase_log import last_started
from offloadprobe.measure.probes.cgroup import locate


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildSpec:
    """One child run: its label, its configuration and its environment."""

    label: str
    config: RunConfig
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    cgroup_procs: Path | None = None
    """A ``cgroup.procs`` file the child joins before it starts (memory limits)."""
    phase_log: Path | None = None
    """Where the child logs its phases; a temporary file when not given."""
    nproc_per_node: int = 1
    """Ranks the child starts through torchrun's launcher (``run --nproc-per-node``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildOutcome:
    """What one child produced: a report, and how it failed if it did."""

    label: str
    exit_code: int
    report: dict[str, Any] | None
    failure: ChildFailure | None
    stderr_tail: str

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def verdict(self) -> str:
        """``ok``, or the failure in one line (its kind's own words)."""
        if self.failure is None:
            return "ok"
        return f"{self.failure.kind}: {self.failure.message}{self.failure.where}"

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


def oom_kills() -> int | None:
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


def signal_message(signum: int, oom_before: int | None, oom_after: int | None) -> str:
    """A signal's name, and for SIGKILL whether the cgroup recorded an OOM kill."""
    known = signum in signal.Signals._value2member_map_
    name = signal.Signals(signum).name if known else str(signum)
    if signum == signal.SIGKILL and oom_before is not None and oom_after is not None:
        if oom_after > oom_before:
            return f"{name}, cgroup OOM (oom_kill {oom_before} -> {oom_after})"
        return f"{name} (no OOM kill recorded by the cgroup)"
    if signum == signal.SIGKILL:
        return f"{name}, probably out of memory (no cgroup counter to confirm)"
    return name


def _joiner(procs: Path | None):
    if procs is None:
        return None

    def join() -> None:
        procs.write_text(str(os.getpid()))

    return join


def _failure(code: int, error_file: Path, log: Path, oom_before: int | None, tail: str):
    where = last_started(log)
    cycle, phase = where if where else (None, None)
    if code < 0:
        return ChildFailure(
            kind="killed",
            exit_code=code,
            message=signal_message(-code, oom_before, oom_kills()),
            cycle=cycle,
            phase=phase,
        )
    try:
        said = json.loads(error_file.read_text())
    except (OSError, ValueError):
        last = tail.splitlines()[-1] if tail else f"exit code {code}"
        said = {"kind": "crashed", "message": last}
    return ChildFailure(
        kind=str(said["kind"]),
        exit_code=code,
        message=str(said["message"]),
        cycle=cycle,
        phase=phase,
    )


def run_child(spec: ChildSpec, *, python: str = sys.executable) -> ChildOutcome:
    """Run ``offloadprobe run`` on ``spec.config`` in a fresh interpreter; collect its JSON."""
    collector.resume()  # a parent that waits on children collects as usual
    with tempfile.TemporaryDirectory(prefix="offloadprobe-") as tmp:
        work = Path(tmp)
        config, out, error_file = work / "config.json", work / "report.json", work / "error.json"
        log = spec.phase_log or work / "phases.jsonl"
        config.write_text(json.dumps(spec.config.to_dict()))
        cmd = [python, "-m", "offloadprobe", "run", "--config", str(config), "--json", str(out)]
        cmd += ["--no-progress", "--phase-log", str(log)]
        if spec.nproc_per_node > 1:
            cmd += ["--nproc-per-node", str(spec.nproc_per_node)]
        env = {**os.environ, **spec.env, ERROR_FILE_ENV: str(error_file)}
        run_id = uuid.uuid4().hex[:12]
        if spec.nproc_per_node > 1:  # the launcher names its node group after it
            env["OFFLOADPROBE_RUN_ID"] = run_id
        oom_before = oom_kills()
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
            if spec.nproc_per_node > 1:  # its ranks run in sessions of their own: kill them
                kill_node_group(run_id)
            where = last_started(log)
            failure = ChildFailure(
                kind="timed out",
                exit_code=124,
                message=f"timed out after {spec.timeout_s:g} s",
                cycle=where[0] if where else None,
                phase=where[1] if where else None,
            )
            return ChildOutcome(
                label=spec.label, exit_code=124, report=None, failure=failure, stderr_tail=""
            )
        report = json.loads(out.read_text()) if out.exists() else None
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        failure = None
        if proc.returncode != 0:
            failure = _failure(proc.returncode, error_file, log, oom_before, tail)
        return ChildOutcome(
            label=spec.label,
            exit_code=proc.returncode,
            report=report,
            failure=failure,
            stderr_tail=tail,
        )
