"""The parent's side of the zygote (``engine.zygote``): CPU-emulation workers forked from
one pre-imported interpreter instead of each importing torch and megatron-core again.

A job is forked only where that changes nothing a figure depends on: one process or the
launcher of ranks (not a rank: the launcher forks those itself, ``engine.world.forked``)
in CPU emulation, from a zygote started with the job's own environment (but for
variables no import reads, ``INERT``): what an import reads from the environment is then
what a fresh interpreter of that job would have read.
A zygote starts with the second such job of its environment in this process (with the
first where the caller ``expect``-ed several: the rows of ``compare`` and ``repro``, or
every job of a process that said it is a session: ``expect_a_session``); at
most ``MAX_ZYGOTES`` run, and each lives as long as this process: it dies with it
(``PR_SET_PDEATHSIG``) and ends when its stdin closes. Every other job, a lone one, and
every job after a zygote failed to start (or refused: a kernel that hides page frame
numbers) is a fresh interpreter (``supervisor``).

``ForkedWorker`` stands for a forked worker where the supervisor holds a ``Popen``: its
pid, ``poll`` and ``wait``, with the exit status the zygote reaped (an exit code, or minus
the signal that ended it). The worker is the zygote's child, not this process's.

This module imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from typing import IO, Any

from offloadprobe.core.devices import forks_cleanly
from offloadprobe.core.job import Job
from offloadprobe.engine.forking import die_with_parent

INERT = frozenset({"COLUMNS", "LINES", "PYTEST_CURRENT_TEST"})
"""Variables no import reads: a job may differ from the zygote in these (its worker gets
the job's own values, as it gets every variable)."""

FORK_TIMEOUT_S = 30.0
"""How long a fork may take to be answered before the zygote is given up (and killed)."""

READY_TIMEOUT_S = 120.0
"""How long the zygote may take to import everything before it is given up on."""


class Zygote:
    """One running zygote: its process and what it said."""

    def __init__(
        self, env: dict[str, str], python: str = sys.executable, engine: str = "megatron"
    ) -> None:
        self.proc = subprocess.Popen(
            [python, "-m", "offloadprobe.engine.zygote", engine],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._lock = threading.Condition()
        self._started: list[int] = []
        self._ended: dict[int, int] = {}
        self._ready = False
        self._gone = False
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes] | None) -> None:
        assert stream is not None
        for line in stream:
            with contextlib.suppress(ValueError):
                said = json.loads(line)
                with self._lock:
                    if "ready" in said:
                        self._ready = True
                    elif "refused" in said:
                        self._gone = True
                    elif "started" in said:
                        pid = int(said["started"])
                        # a pid the kernel reused from a reaped worker: that end is not this
                        self._ended.pop(pid, None)
                        self._started.append(pid)
                    elif "ended" in said:
                        self._ended[int(said["ended"])] = int(said["status"])
                    self._lock.notify_all()
        with self._lock:
            self._gone = True
            self._lock.notify_all()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        with self._lock:
            self._lock.wait_for(lambda: self._ready or self._gone, timeout=timeout_s)
            return self._ready and not self._gone

    def fork(self, request: dict[str, Any]) -> ForkedWorker | None:
        """Ask for one worker; None where the zygote is gone."""
        with self._lock:
            before = len(self._started)
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return None
            self._lock.wait_for(
                lambda: len(self._started) > before or self._gone, timeout=FORK_TIMEOUT_S
            )
            if len(self._started) <= before:
                # a worker that answers later must not run beside the fresh one that now
                # takes its job: the zygote goes, and its workers with it (PDEATHSIG)
                self._gone = True
                with contextlib.suppress(OSError):
                    self.proc.kill()
                return None
            return ForkedWorker(self, self._started[before])

    def outlived(self, pid: int) -> bool:
        """Whether the zygote ended while worker ``pid`` ran (it died with the zygote)."""
        with self._lock:
            return self._gone and pid not in self._ended

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The worker's exit status once reaped (waiting up to ``timeout``); a worker whose
        zygote ended first was killed with it (SIGKILL, ``PR_SET_PDEATHSIG``)."""
        with self._lock:
            self._lock.wait_for(lambda: pid in self._ended or self._gone, timeout=timeout)
            if pid in self._ended:
                return self._ended[pid]
            return -9 if self._gone else None

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._gone

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ForkedWorker:
    """A forked worker, as the supervisor uses a ``Popen``."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.status(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.status(self.pid, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(["offloadprobe.engine.zygote"], timeout or 0)
        return self.returncode


MAX_ZYGOTES = 2
"""Zygotes kept at once, one per environment (the least recently used one goes first)."""

_ZYGOTES: dict[tuple[tuple[str, str], ...], Zygote] = {}
_FAILED: list[bool] = []
_SEEN: dict[tuple[tuple[str, str], ...], int] = {}
"""CPU-emulation workers this process started, per environment."""
_EXPECTED = [0]
"""How many workers a caller said it is about to start (taken by the next one)."""
_SESSION = [False]
"""Whether this process said it starts workers all its life (``expect_a_session``)."""


def expect(workers: int) -> None:
    """The caller is about to start ``workers`` CPU-emulation workers (the rows of
    ``compare`` or ``repro``): with two or more, the next is forked too, not only the
    second of its environment."""
    _EXPECTED[0] = max(_EXPECTED[0], workers)


def expect_a_session() -> None:
    """This process starts CPU-emulation workers again and again while it lives (a test
    session with several offload tests): every worker forks, the first of an environment
    too, instead of that one paying a fresh interpreter's imports beside the zygote's."""
    _SESSION[0] = True


def _key(env: dict[str, str], engine: str = "megatron") -> tuple[tuple[str, str], ...]:
    """A zygote serves one environment and one engine (it imported that engine's modules:
    a worker of another engine forked from it would count them in its zero)."""
    return (("engine", engine), *sorted((k, v) for k, v in env.items() if k not in INERT))


def forkable(job: Job) -> bool:
    """Whether ``job`` may be forked from a zygote at all: one process, or the launcher of
    ranks, in CPU emulation on a host without a GPU (``devices.forks_cleanly``), and no
    zygote failed (or refused) to start here. A launcher is born in the node's memory
    cgroup (the supervisor's group for it), with the job's environment, as a fresh one;
    its ranks it forks itself."""
    if _FAILED or job.rank_of_launch:
        return False
    return forks_cleanly(job.config.device)


def _zygote(
    key: tuple[tuple[str, str], ...], env: dict[str, str], engine: str = "megatron"
) -> Zygote | None:
    """The zygote of ``env`` (started if none runs); None where it cannot be."""
    made = _ZYGOTES.pop(key, None)
    if made is not None and made.alive():
        _ZYGOTES[key] = made  # the most recently used now
        return made
    if made is not None:
        made.close()
    while len(_ZYGOTES) >= MAX_ZYGOTES:
        _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
    try:
        made = Zygote(env, engine=engine)
    except OSError:
        _FAILED.append(True)
        return None
    if not made.wait_ready():
        made.close()
        _FAILED.append(True)
        return None
    _ZYGOTES[key] = made
    return made


def fork_worker(job: Job, env: dict[str, str], procs: str) -> ForkedWorker | None:
    """``job`` in a worker forked from the zygote of its environment, its output in the
    job folder's logs; None where it is not (then the caller starts a fresh interpreter):
    a job that is not ``forkable``, or the first of its environment in this process (a
    zygote pays for itself from the second on: alone, a fresh interpreter costs the same
    imports and no fork) unless the caller ``expect``-ed several."""
    if not forkable(job):
        return None
    engine = job.config.engine
    key = _key(env, engine)
    _SEEN[key] = _SEEN.get(key, 0) + 1
    expected, _EXPECTED[0] = _EXPECTED[0] > 1 or _SESSION[0], 0
    if key not in _ZYGOTES and _SEEN[key] < 2 and not expected:
        return None
    made = _zygote(key, env, engine)
    if made is None:
        return None
    folder = job.folder
    request = {
        "job": str(job.path),
        "out": str(folder / "stdout.log"),
        "err": str(folder / "stderr.log"),
        "procs": procs,
        "env": env,
    }
    return made.fork(request)


def running() -> list[Zygote]:
    """The zygotes running now."""
    return list(_ZYGOTES.values())


def shutdown() -> None:
    """End every zygote (they would end with this process anyway)."""
    while _ZYGOTES:
        _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
