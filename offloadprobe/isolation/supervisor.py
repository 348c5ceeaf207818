"""The parent's side of the worker protocol: start a worker, watch it, clean up after it.

``run_worker`` makes a work folder, writes the job, starts ``python -m
offloadprobe.engine.worker JOB`` in a session of its own (so its whole process group can
be ended) with ``PR_SET_PDEATHSIG`` (it dies with the parent), optionally inside a memory
cgroup, and waits: with a timeout, feeding the phase log to a progress callback, while a
warden (``isolation.warden``) takes what the worker tells it as it runs and watches its
cgroup membership. However the worker ends, the outcome says how
(``core.verdicts.ended``): a record to judge (the one the worker sent, the file checked
against it), or killed, exited early, timed out, inconsistent, escaped. Afterwards nothing
it started is left: not a process, not a file, not a cgroup. A reaper process
(``reaper.py``) does the same if this process is itself SIGKILLed.

This module imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from offloadprobe.core import collector
from offloadprobe.core.job import Job, WorkerResult
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.streamed import Streamed
from offloadprobe.core.verdicts import ended
from offloadprobe.engine.forking import die_with_parent
from offloadprobe.isolation import signals, zygote
from offloadprobe.isolation.escapes import EscapeWatch
from offloadprobe.isolation.warden import Warden, payload_of
from offloadprobe.measure.phase_log import last_started, recorded_phases

OUTPUT_LINES = 30
"""Lines of the worker's own output shown after the verdict (the rest is counted)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerSpec:
    """How to run one worker: its job (the folder is filled in here) and its limits."""

    job: Job
    env: dict[str, str] = field(default_factory=dict)
    """Variables added to the worker's environment (PyTorch's allocator settings)."""
    timeout_s: float | None = None
    cgroup: Any = None
    """A ``MemoryGroup`` the worker (and all it starts) runs in; None: the parent's."""
    on_phase: Callable[[dict[str, Any]], None] | None = None
    """Called with each phase-log event as it appears (progress bars)."""
    on_started: Callable[[Job], Any] | None = None
    """Called once the worker runs (``repro`` starts its gate keeper here); what it returns
    is stopped (``.stop()``) when the worker ends."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerOutcome:
    """How one worker ended and what it left."""

    exit_code: int
    result: WorkerResult | None
    failure: Failure | None
    """How the process ended when that decides the row (or the worker's own failure)."""
    output: str = ""
    """What the worker printed (stdout, then stderr), for the framed block after a verdict."""
    timeline: dict[str, Any] | None = None
    pid: int = 0
    phases: list[dict[str, Any]] = field(default_factory=list)
    """Every phase record the worker's phase log holds: what it measured even if it never
    wrote its result (rank 0's, over several ranks)."""
    streamed: Streamed | None = None
    """What the worker told its parent as it ran, and the parent's own readings beside it
    (``core.streamed``); None for a launcher of ranks (its ranks have no channel)."""

    @property
    def report(self) -> dict[str, Any] | None:
        return self.result.report if self.result is not None else None

    @property
    def stderr_tail(self) -> str:
        return "\n".join(self.output.strip().splitlines()[-5:])


class Spawner(Protocol):
    """Runs a written job to its end; returns the exit status and the captured output."""

    def __call__(self, job: Job, spec: WorkerSpec) -> tuple[int, str]: ...


def _preexec(cgroup: Any) -> Callable[[], None]:
    def run() -> None:
        die_with_parent()
        if cgroup is not None:
            cgroup.procs.write_text(str(os.getpid()))

    return run


def _reaper(folder: Path, pgid: int, cgroup: Any) -> subprocess.Popen[bytes] | None:
    script = Path(__file__).with_name("reaper.py")
    args = [sys.executable, "-I", "-S", str(script), str(os.getpid()), str(folder), str(pgid)]
    if cgroup is not None:
        args.append(str(cgroup.path))
    try:
        return subprocess.Popen(
            args,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None


def _tail(path: Path, seen: int, on_phase: Callable[[dict[str, Any]], None] | None) -> int:
    """Feed the phase-log lines after the first ``seen`` to ``on_phase``; lines seen now."""
    if on_phase is None:
        return seen
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return seen
    for line in lines[seen:]:
        with contextlib.suppress(ValueError):
            on_phase(json.loads(line))
    return len(lines)


ESCAPED = "escaped.txt"
"""In the job folder: what the escape watch found (``isolation.escapes``)."""
ORPHANED = "zygote-ended.txt"
"""In the job folder: the zygote a forked worker came from ended while it ran."""


def subprocess_spawner(job: Job, spec: WorkerSpec) -> tuple[int, str]:
    """The real thing: a worker in a session of its own, forked from the zygote where
    that changes nothing (``isolation.zygote``), else a fresh interpreter."""
    folder = job.folder
    out_path, err_path = folder / "stdout.log", folder / "stderr.log"
    env = worker_environment(spec.env)
    procs = str(spec.cgroup.procs) if spec.cgroup is not None else ""
    proc: Any = zygote.fork_worker(job, env, procs)
    if proc is None:
        cmd = [sys.executable, "-m", "offloadprobe.engine.worker", str(job.path)]
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=_preexec(spec.cgroup),
            )
    signals.track(proc, spec.cgroup)
    reaper = _reaper(folder, proc.pid, spec.cgroup)
    keeper = spec.on_started(job) if spec.on_started is not None else None
    deadline = time.monotonic() + spec.timeout_s if spec.timeout_s else None
    watch = EscapeWatch(proc.pid, spec.cgroup) if spec.cgroup is not None else None
    seen = 0
    try:
        while True:
            try:
                code = proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                seen = _tail(job.phase_log(0), seen, spec.on_phase)
                if watch is not None:
                    watch.poll()
                if deadline is not None and time.monotonic() > deadline:
                    signals.stop(proc, spec.cgroup)
                    raise WorkerTimedOut(spec.timeout_s or 0) from None
        _tail(job.phase_log(0), seen, spec.on_phase)
    finally:
        if keeper is not None:
            keeper.stop()
        if watch is not None:
            watch.kill_found()
            if watch.found:
                (folder / ESCAPED).write_text(watch.message() or "")
        signals.stop(proc, spec.cgroup)
        signals.untrack(proc)
        if reaper is not None:
            with contextlib.suppress(OSError):
                reaper.kill()
                reaper.wait(timeout=1)
    output = _read(out_path) + _read(err_path)
    if isinstance(proc, zygote.ForkedWorker) and proc.zygote.outlived(proc.pid):
        (folder / ORPHANED).write_text("")
    return code, output


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class WorkerTimedOut(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds


def worker_environment(extra: dict[str, str]) -> dict[str, str]:
    """The parent's environment for a worker, plus ``extra``; a ``TORCHDYNAMO_DISABLE`` this
    process set for itself (CPU emulation) is not passed on: only the user's carries over."""
    from offloadprobe.engine.runtime.eager import set_here

    env = dict(os.environ)
    if set_here():
        env.pop("TORCHDYNAMO_DISABLE", None)
    env.update(extra)
    return env


subprocess_spawner.isolates = True  # type: ignore[attr-defined]
SPAWNER: list[Spawner] = [subprocess_spawner]
"""The spawner in use; tests of what is not isolation put an in-process one first."""


@contextlib.contextmanager
def using(spawner: Spawner) -> Iterator[None]:
    SPAWNER.insert(0, spawner)
    try:
        yield
    finally:
        SPAWNER.remove(spawner)


@contextlib.contextmanager
def work_folder(prefix: str = "offloadprobe-") -> Iterator[Path]:
    """A private folder for one worker, removed afterwards whatever happens."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    signals.track_folder(folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        signals.untrack_folder(folder)


@contextlib.contextmanager
def own_group(spec: WorkerSpec) -> Iterator[WorkerSpec]:
    """The worker's own memory cgroup: the caller's (``repro``'s limited group), or one made
    here and removed afterwards; none for a launcher (its ranks share the node's group) or
    a worker that runs in this process. ``spec`` comes back with the job saying which."""
    spawner = SPAWNER[0]
    if spec.job.launch is not None or not getattr(spawner, "isolates", False):
        yield spec
        return
    if spec.cgroup is not None:
        yield replace(spec, job=replace(spec.job, own_cgroup=str(spec.cgroup.path)))
        return
    import uuid

    from offloadprobe.measure.cgroup import CgroupUnavailable, create_group

    try:
        group = create_group(f"offloadprobe-worker-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    except (CgroupUnavailable, OSError) as why:
        yield replace(spec, job=replace(spec.job, cgroup_missing=str(why)))
        return
    try:
        yield replace(spec, cgroup=group, job=replace(spec.job, own_cgroup=str(group.path)))
    finally:
        with contextlib.suppress(OSError):
            group.kill()
            group.remove()


def run_worker(spec: WorkerSpec) -> WorkerOutcome:
    """Run ``spec.job`` in a worker; collect its result and how it ended."""
    collector.resume()  # a parent that waits on children collects as usual
    signals.install()
    with work_folder() as folder, own_group(spec) as spec:
        job = replace(spec.job, workdir=str(folder))
        warden = None  # a launcher's ranks report through it, each in its own way
        if job.launch is None:
            warden = Warden(spec.cgroup, scale=payload_of(job.config))
            job = replace(job, channel=warden.path, peaks_by_parent=warden.owns_peaks)
        job.write()
        if job.gate:
            job.gate_dir.mkdir(exist_ok=True)
        oom_before = spec.cgroup.oom_kills() if spec.cgroup is not None else None
        streamed = None
        try:
            try:
                code, output = SPAWNER[0](job, replace(spec, job=job))
            finally:
                streamed = warden.stop() if warden is not None else None
        except WorkerTimedOut as exc:
            where = last_started(job.phase_log(0))
            failure = Failure(
                kind="timed out",
                message=str(exc),
                cycle=where[0] if where else None,
                phase=where[1] if where else None,
                exit_code=124,
            )
            return WorkerOutcome(
                exit_code=124,
                result=None,
                failure=failure,
                phases=recorded_phases(job.phase_log(0)),
                streamed=streamed,
            )
        if streamed is not None and getattr(SPAWNER[0], "isolates", False):
            streamed = replace(streamed, expected=True)  # a real worker: it must report
        result, streamed = _result(job, streamed)
        ended_as: Failure | None
        oom = (oom_before, spec.cgroup.oom_kills() if spec.cgroup is not None else None)
        ended_as = ended(
            exit_code=code,
            wrote_result=result is not None,
            result_exit_code=result.exit_code if result is not None else None,
            result_failure=result.failure if result is not None else None,
            last_phase=last_started(job.phase_log(0)),
            oom_kills=oom,
        )
        escaped = [m for m in (_escape_file(folder), warden and warden.escape_message()) if m]
        if escaped:  # its figures miss what the escaped process held
            # placed where the worker was when it was found out and killed: the phase
            # then under way, or the last one that started (either watch may find it)
            where = (warden.where if warden is not None else None) or last_started(job.phase_log(0))
            ended_as = Failure(
                kind="escaped",
                message="; ".join(escaped),
                cycle=where[0] if where else None,
                phase=where[1] if where else None,
                exit_code=1,
            )
        if (folder / ORPHANED).exists() and result is None:
            where = last_started(job.phase_log(0))
            ended_as = Failure(
                kind="killed",
                message="SIGKILL: the zygote it was forked from ended while it ran "
                "(not the strategy's doing: run it again)",
                cycle=where[0] if where else None,
                phase=where[1] if where else None,
                exit_code=-9,
            )
        timeline = None
        if job.timeline and job.timeline_path.exists():
            with contextlib.suppress(OSError, ValueError):
                timeline = json.loads(job.timeline_path.read_text())
        return WorkerOutcome(
            exit_code=code,
            result=result,
            failure=ended_as,
            output=output,
            timeline=timeline,
            pid=result.pid if result is not None else 0,
            phases=recorded_phases(job.phase_log(0)),
            streamed=streamed,
        )


def _escape_file(folder: Path) -> str | None:
    path = folder / ESCAPED
    return path.read_text() if path.exists() else None


def _result(job: Job, streamed: Streamed | None) -> tuple[WorkerResult | None, Streamed | None]:
    """The worker's result: the one it sent its parent where it sent one (the file is then
    only checked against it: ``rewritten``), else its record file (``unsent`` where the
    worker was connected and should have sent it)."""
    path = job.result_path(None)
    try:
        written: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        written = None
    if streamed is None or not (streamed.connected or streamed.expected):
        return WorkerResult.from_dict(written) if written is not None else None, streamed
    if streamed.result is None:
        unsent = written is not None
        kept = WorkerResult.from_dict(written) if written is not None else None
        return kept, replace(streamed, unsent=unsent)
    sent = WorkerResult.from_dict(streamed.result)
    same = written is not None and _canonical(written) == _canonical(streamed.result)
    return sent, replace(streamed, rewritten=not same)


def _canonical(data: Any) -> str:
    """One text per JSON value (a NaN equals itself here)."""
    return json.dumps(data, sort_keys=True)


def framed_output(outcome: WorkerOutcome, limit: int = OUTPUT_LINES) -> str:
    """The worker's own output as a block that cannot pass for offloadprobe's: every line
    behind ``| ``, under a header that says whose it is (empty when it printed nothing)."""
    lines = outcome.output.rstrip().splitlines()
    if not lines:
        return ""
    shown = lines[-limit:]
    header = f"output of the measured process ({len(lines)} lines"
    header += f", the last {len(shown)} shown):" if len(shown) < len(lines) else "):"
    return "\n".join([header, *(f"| {line}" for line in shown)]) + "\n"
