"""The parent side of ``attach``: write the job file, run the command, collect. No torch.

The command runs as given (a ``.py`` script runs under this interpreter), with the
bootstrap folder first on its PYTHONPATH and ``OFFLOADPROBE_JOB`` naming the job file;
every other byte of its environment, its stdin, stdout and stderr are the user's. It
runs in a process group of its own; SIGINT, SIGTERM and SIGHUP sent to ``attach`` are
forwarded to that group, so ``torchrun`` and its ranks get them as they would.

The whole job runs in a memory cgroup of its own where one can be made (the node's
exact peak for the whole run), and each process that loads the bootstrap in one of its
own inside it (``groups.py``), read around each of its calls by the parent's meter
(``meter.py``) and watched by the parent's tree watcher (``tree.py``: a process found
outside its group has escaped). Where no cgroup can be made, the parent's sampled sum of
the process tree's RSS stands in, and the output says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from offloadprobe.attach import protocol
from offloadprobe.attach.collect import NodeMemory, collect
from offloadprobe.attach.groups import JobGroups, inside
from offloadprobe.attach.meter import Meter
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


def meter_name(job_id: str) -> str:
    """The meter's socket name (abstract namespace) for job ``job_id``."""
    return f"offloadprobe-attach-{job_id}"


def write_job_file(job: AttachJob, job_id: str, meter: str | None) -> Path:
    job.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "version": protocol.VERSION,
        "job_id": job_id,
        "out_dir": str(job.out_dir.resolve()),
        "phases": [spec.to_json() for spec in job.specs],
        "meter": meter,
        "reset_gpu_peak": job.reset_gpu_peak,
    }
    path = job.out_dir / "job.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def _joiner(procs: Path | None):
    if procs is None:
        return None

    def join() -> None:
        procs.write_text(str(os.getpid()))

    return join


def _member(root: int, groups: JobGroups | None) -> Callable[[int], bool]:
    """Whether a process that connects to the meter is one of the job's: inside the job's
    cgroup, or (without one) the job's process or a descendant of it."""

    def member(pid: int) -> bool:
        if groups is not None:
            where = groups.where(pid)
            return where is not None and inside(where, groups.job.path)
        try:
            proc = psutil.Process(pid)
            return pid == root or any(p.pid == root for p in proc.parents())
        except psutil.Error:
            return False

    return member


@contextlib.contextmanager
def _forwarding(pgid: int) -> Iterator[list[int]]:
    """Forward SIGINT/SIGTERM/SIGHUP to the job's process group while it runs; the list
    yielded holds each signal forwarded, in order."""
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        yield received
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
    groups: JobGroups | None = None
    if job.use_cgroup:
        groups, note = JobGroups.make(job_id)
        if groups is None:
            note = f"no memory cgroup for the job ({note}): {TREE_FALLBACK}"
    else:
        note = f"no memory cgroup (--no-cgroup): {TREE_FALLBACK}"
    if note:
        notes.append(note)
    meter = Meter(meter_name(job_id), groups=groups, member=lambda pid: False)
    job_file = write_job_file(job, job_id, meter_name(job_id))
    env = job_environment(job_file)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            process_group=0,
            preexec_fn=_joiner(groups.entry if groups else None),
        )
    except BaseException:
        meter.stop()
        if groups is not None:
            groups.close([])
        raise
    meter.member = _member(proc.pid, groups)
    watcher = TreeWatcher(proc.pid, groups=groups)
    meter.on_lost = watcher.look_at
    meter.start()
    watcher.start()
    with _forwarding(proc.pid) as received:
        while True:
            try:
                returncode = proc.wait()
                break
            except KeyboardInterrupt:  # a handler replaced ours meanwhile: keep waiting
                continue
    seconds = time.monotonic() - start
    watcher.stop()
    ledger = meter.stop()
    host = socket.gethostname()
    peak = groups.close(notes) if groups is not None else None
    if groups is not None and peak is not None:
        memory = NodeMemory(host=host, peak_bytes=peak, method=groups.method)
    else:
        memory = NodeMemory(host=host, peak_bytes=watcher.rss_peak or None, method=TREE_METHOD)
    if ledger.refused:
        notes.append(f"{ledger.refused} connection(s) to attach from outside the job refused")
    record = collect(
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
        ledger=ledger,
        grouped=groups is not None,
        escaped=list(watcher.escaped.values()),
        peak_resets=groups.foreign_resets if groups is not None else (),
    )
    if received and returncode != 0:  # attach was stopped, and the job with it
        record = dataclasses.replace(record, interrupted=received[-1])
    return record
