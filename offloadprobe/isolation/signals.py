"""A parent's signals: SIGTERM, SIGINT or SIGHUP end every worker it started, then itself.

``install`` (from the main thread, once) makes each of the three signals raise
``Interrupted`` in the parent's main thread. The code waiting on a worker unwinds through
its ``finally`` blocks, which stop the worker's whole process group and memory cgroup and
remove its folder; the entry point then prints one verdict line and exits 128 plus the
signal's number. ``stop`` is the one way a worker is ended: SIGTERM to its process group
(torchrun's launcher stops its ranks on it), SIGKILL to whatever is left after a grace
period, the ranks in sessions of their own included (found in the cgroup, and among the
descendants seen before the first signal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 2.0
"""How long a worker's process group has to end on SIGTERM before SIGKILL."""

_LIVE: dict[int, tuple[subprocess.Popen[bytes], Any]] = {}
_FOLDERS: set[Path] = set()
_INSTALLED = False


class Interrupted(BaseException):
    """The parent received one of ``HANDLED``; every worker is stopped on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def install() -> None:
    """Raise ``Interrupted`` on SIGTERM, SIGINT and SIGHUP (main thread only; once)."""
    global _INSTALLED
    if _INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    for signum in HANDLED:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, _raise)
    _INSTALLED = True


def track(proc: subprocess.Popen[bytes], cgroup: Any) -> None:
    _LIVE[proc.pid] = (proc, cgroup)


def untrack(proc: subprocess.Popen[bytes]) -> None:
    _LIVE.pop(proc.pid, None)


def track_folder(folder: Path) -> None:
    _FOLDERS.add(folder)


def untrack_folder(folder: Path) -> None:
    _FOLDERS.discard(folder)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return children
    except psutil.Error:
        return []


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop(proc: subprocess.Popen[bytes], cgroup: Any = None) -> None:
    """End the worker and everything it started (no-op for a worker already reaped whose
    group is empty)."""
    family = _descendants(proc.pid)
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    _signal_group(proc.pid, signal.SIGKILL)
    for member in family:
        with contextlib.suppress(psutil.Error):
            member.kill()
    if cgroup is not None:
        with contextlib.suppress(OSError):
            cgroup.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        proc.wait(timeout=5)


def stop_all() -> None:
    """Stop every live worker (an entry point on its way out of an interrupt)."""
    for proc, cgroup in list(_LIVE.values()):
        stop(proc, cgroup)
        _LIVE.pop(proc.pid, None)
