"""Clean up after a parent that was killed: its workers, their cgroup, their work folder.

A parent that ends normally, or on SIGTERM, SIGINT or SIGHUP, cleans up itself. One that
is SIGKILLed cannot; its workers die with it (``PR_SET_PDEATHSIG``), and this process,
started beside each worker in a session of its own, removes the rest: it waits until the
parent is gone, then kills whatever is left in the worker's memory cgroup and the groups
below it (a rank's own, below its node's) and the process group it was given, removes the
groups and the work folder, and exits. When the parent cleans up first, the folder
disappears and this process exits on its own.

Standard library only, run as ``python -I -S reaper.py PARENT_PID WORKDIR PGID [CGROUP]``:
it starts in milliseconds and imports nothing of offloadprobe.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for_exit(pid: int, folder: str) -> bool:
    """Block until ``pid`` is gone (True) or ``folder`` was removed by it (False)."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    while True:
        if fd is not None:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                return True
        else:
            time.sleep(0.2)
            if not _alive(pid):
                return True
        if not os.path.isdir(folder):
            return False


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _subtree(path: str) -> list[str]:
    """The group and every group below it (a rank's below its node's), each before its
    parent: the order they can be removed in."""
    below = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and os.path.exists(
                os.path.join(entry.path, "cgroup.procs")
            ):
                below += _subtree(entry.path)
    return [*below, path]


def _kill_cgroup(path: str) -> None:
    groups = _subtree(path)
    kill_file = os.path.join(path, "cgroup.kill")
    try:
        if os.path.exists(kill_file):
            with open(kill_file, "w") as fh:
                fh.write("1")
        else:
            for group in groups:
                with open(os.path.join(group, "cgroup.procs")) as fh:
                    for pid in fh.read().split():
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(pid), signal.SIGKILL)
    except OSError:
        return
    deadline = time.monotonic() + 5
    for group in groups:
        while time.monotonic() < deadline:
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def main(argv: list[str]) -> int:
    parent, folder, pgid = int(argv[0]), argv[1], int(argv[2])
    cgroup = argv[3] if len(argv) > 3 else None
    if not _wait_for_exit(parent, folder):
        return 0
    _kill_group(pgid)
    if cgroup:
        _kill_cgroup(cgroup)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(main(sys.argv[1:]))
