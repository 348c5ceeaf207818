"""This process's attach session: the job file it read, its stream, its probe, its hook.

``activate`` is called by the bootstrap (``sitecustomize``, or verl's ``verl.plugins``
entry point) in every Python process of the job. It reads the one environment variable
``OFFLOADPROBE_JOB``, says hello to the parent (``meter_client``: the parent reads
which image this is and moves the process into a cgroup of its own), writes the
``started`` record, installs the import hook, and
registers an ``exit`` record at interpreter exit and a fresh stream in forked children.
Without that variable it does nothing and returns None. stdlib only.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from typing import Any

from offloadprobe.attach import hook, protocol
from offloadprobe.attach.meter_client import MeterClient
from offloadprobe.attach.probe import CallProbe, ranks
from offloadprobe.attach.stream import Stream

SESSION: Session | None = None
"""The active session of this process; None outside attach."""


class Session:
    """Begin and end measured calls; write their records."""

    def __init__(self, job: dict[str, Any], how: str) -> None:
        self.job = job
        self.how = how
        self.meter = MeterClient(job.get("meter"))
        self.probe = CallProbe(meter=self.meter, reset_gpu_peak=job.get("reset_gpu_peak", True))
        self.stream = Stream(job["out_dir"], self.probe.host)
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.hook: hook.Hook | None = None

    def begin(self, phase: str, target: str) -> dict[str, Any] | None:
        """Open one call of ``phase``; None if the measurement itself failed."""
        try:
            with self.lock:
                index = self.counts[phase] = self.counts.get(phase, 0) + 1
            return self.probe.enter(phase, target, index)
        except Exception:
            return None

    def end(self, frame: dict[str, Any], error: BaseException | None) -> None:
        """Close the call and append its record. A call opened before a fork is the
        parent's: a forked child does not record it."""
        try:
            if frame["pid"] != os.getpid():
                return
            self.stream.write(protocol.CALL, **self.probe.exit(frame, error))
        except Exception:
            return

    def write_started(self, how: str) -> None:
        self.stream.write(
            protocol.STARTED,
            pid=os.getpid(),
            ppid=os.getppid(),
            host=self.probe.host,
            how=how,
            argv=list(sys.argv)[:32],
            executable=sys.executable,
            python=sys.version.split()[0],
            job_id=self.job.get("job_id"),
            **ranks(),
        )

    def write_exit(self) -> None:
        pending = self.hook.still_pending() if self.hook is not None else []
        self.stream.write(
            protocol.EXIT,
            pid=os.getpid(),
            calls=dict(self.counts),
            pending=[f"{p['module']}:{p['qualname']}" for p in pending],
            **ranks(),
        )


def _at_exit() -> None:
    session = SESSION
    if session is not None and session.stream.pid == os.getpid():
        session.write_exit()
        session.meter.bye()


def _after_fork_in_child() -> None:
    session = SESSION
    if session is None:
        return
    session.lock = threading.Lock()
    session.counts = {}
    session.probe.after_fork()
    session.meter.after_fork()
    session.stream.reopen_after_fork()
    if session.hook is not None:
        session.hook.lock = threading.RLock()
    session.meter.hello()
    session.write_started("fork")


def activate(how: str) -> Session | None:
    """Start this process's session from ``OFFLOADPROBE_JOB`` (once); None without it."""
    global SESSION
    if SESSION is not None:
        return SESSION
    path = os.environ.get(protocol.JOB_ENV)
    if not path:
        return None
    with open(path) as f:
        job = json.load(f)
    if job.get("version") != protocol.VERSION:
        raise RuntimeError(
            f"job file {path} is version {job.get('version')}, not {protocol.VERSION}"
        )
    session = Session(job, how)
    SESSION = session
    session.meter.hello()  # before anything of the job's runs: the parent places us
    session.write_started(how)
    session.hook = hook.install(job.get("phases", []), session.stream.write)
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    return session
