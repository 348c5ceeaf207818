"""The parent side of ``attach``: write the job file, run the command, collect. No torch.

The command runs as given (a ``.py`` script runs under this interpreter), with the
bootstrap folder first on its PYTHONPATH and ``OFFLOADPROBE_JOB`` naming the job file;
every other byte of its environment, its stdin, stdout and stderr are the user's. It
runs in a process group of its own; SIGINT, SIGTERM and SIGHUP sent to ``attach`` are
forwarded to that group, so ``torchrun`` and its ranks get them as they would.

The whole job runs in a memory cgroup of its own where one can be made (the node's
exact peak for the whole run, and at each call's exit); where none can, the parent's
sampled sum of the process tree's RSS stands in, and the output says so. Everything
this verb does with cgroups is in :func:`_job_group` and :func:`_close_group`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.attach import protocol
from offloadprobe.attach.collect import NodeMemory, collect
from offloadprobe.attach.records import JobRecord
from offloadprobe.attach.spec import PhaseSpec
from offloadprobe.attach.tree import TreeWatcher
from offloadprobe.core.errors import UsageError

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
"""The folder put first on the job's PYTHONPATH (it holds ``sitecustomize.py``)."""

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TREE_METHOD = "process tree RSS (sampled)"
TREE_FALLBACK = "node peak is the process tree's RSS, sampled every 50 ms"


@dataclass(frozen=True, kw_only=True, slots=True)
class AttachJob:
    """What to run and what to wrap in it."""

    command: tuple[str, ...]
    specs: tuple[PhaseSpec, ...]
    out_dir: Path
    """Where the job file and every process's stream go (created)."""
    reset_gpu_peak: bool = True
    require_calls: bool = False
    use_cgroup: bool = True


def resolve_command(command: Sequence[str]) -> list[str]:
    """The argv to start: a ``.py`` file runs under this interpreter; anything else must
    be an executable on PATH (checked now: exit 2 before anything starts)."""
    if not command:
        raise UsageError(
            "no command: give it after --, e.g. offloadprobe attach ... -- python train.py"
        )
    first = command[0]
    if first.endswith(".py") and Path(first).is_file():
        return [sys.executable, *command]
    if shutil.which(first) is None:
        raise UsageError(f"cannot run {first!r}: no such file or executable on PATH")
    return list(command)


def job_environment(job_file: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment: the caller's, with the bootstrap first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP), rest) if p)
    env[protocol.JOB_ENV] = str(job_file)
    return env


def write_job_file(job: AttachJob, job_id: str, node_files: dict[str, str] | None) -> Path:
    job.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "version": protocol.VERSION,
        "job_id": job_id,
        "out_dir": str(job.out_dir.resolve()),
        "phases": [spec.to_json() for spec in job.specs],
        "node_cgroup": node_files,
        "reset_gpu_peak": job.reset_gpu_peak,
    }
    path = job.out_dir / "job.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


@dataclass(kw_only=True, slots=True)
class _Group:
    group: Any
    files: dict[str, str]
    method: str


def _job_group(job_id: str) -> tuple[_Group | None, str | None]:
    """A memory cgroup for the job, or None and why not (said in the output)."""
    from offloadprobe.measure.cgroup import CgroupUnavailable, create_group

    try:
        group = create_group(f"offloadprobe-attach-{job_id}")
    except CgroupUnavailable as exc:
        return None, f"no memory cgroup for the job ({exc}): {TREE_FALLBACK}"
    names = (
        ("memory.usage_in_bytes", "memory.max_usage_in_bytes")
        if group.version == 1
        else ("memory.current", "memory.peak")
    )
    files = {"usage": str(group.path / names[0]), "peak": str(group.path / names[1])}
    method = f"cgroup v{group.version} {names[1]}"
    return _Group(group=group, files=files, method=method), group.note


def _close_group(group: _Group, notes: list[str]) -> int | None:
    """The group's peak, then the group removed (processes left in it are moved out first,
    and said in the notes)."""
    from offloadprobe.measure.cgroup import home_procs

    peak = group.group.peak()
    deadline = time.monotonic() + 5.0
    while True:
        try:
            left = group.group.procs.read_text().split()
        except OSError:
            left = []
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        notes.append(
            f"{len(left)} process(es) of the job outlived it (pid {', '.join(left[:8])}): "
            "moved out of its cgroup, still running"
        )
        for pid in left:
            with contextlib.suppress(OSError):
                home_procs(group.group).write_text(pid)
    with contextlib.suppress(OSError):
        group.group.remove()
    return peak


def _joiner(procs: Path | None):
    if procs is None:
        return None

    def join() -> None:
        procs.write_text(str(os.getpid()))

    return join


@contextlib.contextmanager
def _forwarding(pgid: int) -> Iterator[None]:
    """Forward SIGINT/SIGTERM/SIGHUP to the job's process group while it runs."""

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_status(returncode: int) -> int:
    """The job's status as a shell reports it: its code, or 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_attached(job: AttachJob) -> JobRecord:
    """Run the job to its end and collect its record."""
    argv = resolve_command(job.command)
    notes: list[str] = []
    job_id = uuid.uuid4().hex[:12]
    if job.use_cgroup:
        group, note = _job_group(job_id)
    else:
        group, note = None, f"no memory cgroup (--no-cgroup): {TREE_FALLBACK}"
    if note:
        notes.append(note)
    job_file = write_job_file(job, job_id, group.files if group else None)
    env = job_environment(job_file)
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        process_group=0,
        preexec_fn=_joiner(group.group.procs if group else None),
    )
    watcher = TreeWatcher(proc.pid, procs_file=group.group.procs if group else None)
    watcher.start()
    with _forwarding(proc.pid):
        while True:
            try:
                returncode = proc.wait()
                break
            except KeyboardInterrupt:  # a handler replaced ours meanwhile: keep waiting
                continue
    seconds = time.monotonic() - start
    watcher.stop()
    host = socket.gethostname()
    peak = _close_group(group, notes) if group is not None else None
    if peak is not None:
        memory = NodeMemory(host=host, peak_bytes=peak, method=group.method)
    else:
        memory = NodeMemory(host=host, peak_bytes=watcher.rss_peak or None, method=TREE_METHOD)
    return collect(
        command=job.command,
        exit_code=returncode,
        seconds=seconds,
        out_dir=job.out_dir,
        specs=job.specs,
        seen=watcher.seen.values(),
        host=host,
        memory=memory,
        notes=notes,
        require_calls=job.require_calls,
    )
