"""The worker, or processes it started, that left its memory cgroup.

Host figures come from the worker's own memory cgroup, which counts everything the
worker starts. A process with the privilege to write ``cgroup.procs`` (root, in most
containers) can move itself out, and its memory with it. The parent looks at the worker
and its descendants while it waits on the worker, each by its ``/proc/PID/cgroup``: one
outside the group is recorded with its RSS; at the end each one found is killed (it may
have left the worker's session too) and the run fails as ``escaped``: its figures are
not the whole truth. (The worker itself is watched more closely still, at every line of
its channel and every 10 ms: ``isolation.warden``.)
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Escaped:
    pid: int
    command: str
    rss: int
    """Its RSS when it was found outside the group."""


def left(group: Any, pid: int) -> bool:
    """Whether process ``pid`` is out of ``group``: its ``/proc/PID/cgroup`` names no group
    at or below it, and the group's own ``cgroup.procs`` does not list it either (two
    readings of the kernel's that must agree: a cgroup namespace can make the first name
    paths the mount does not have)."""
    return group.holds(pid) is False and pid not in group.pids()


def describe(pid: int) -> Escaped:
    """Process ``pid`` as found outside its group: its command line and RSS now."""
    import psutil

    try:
        proc = psutil.Process(pid)
        line = " ".join(proc.cmdline()).splitlines()
        return Escaped(pid, (line[0][:60] if line else "") or proc.name(), proc.memory_info().rss)
    except psutil.Error:
        return Escaped(pid, "?", 0)


class EscapeWatch:
    """Look for the worker's descendants outside ``group`` every ``every`` polls."""

    def __init__(self, root: int, group: Any, every: int = 5) -> None:
        self.root, self.group, self.every = root, group, every
        self.found: dict[int, Escaped] = {}
        self._polls = 0

    def poll(self) -> None:
        self._polls += 1
        if self._polls % self.every == 0:
            self.look()

    def look(self) -> None:
        import psutil

        if self.root not in self.found and left(self.group, self.root):
            self.found[self.root] = describe(self.root)
        try:
            descendants = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        if not descendants:
            return
        try:
            inside = set(self.group.pids())
        except OSError:
            return
        for proc in descendants:
            if proc.pid in inside or proc.pid in self.found:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.pid in set(self.group.pids()):  # joined since the first read
                    continue
                if self.group.holds(proc.pid) is not False:  # in a group below it
                    continue
                self.found[proc.pid] = describe(proc.pid)

    def kill_found(self, wait_s: float = 5.0) -> None:
        """SIGKILL each one found, and wait (up to ``wait_s``) until it is gone: a killed
        process on a busy host can still be running when the signal call returns."""
        import psutil

        killed = []
        for pid in self.found:
            with contextlib.suppress(OSError, psutil.Error):
                proc = psutil.Process(pid)
                os.kill(pid, signal.SIGKILL)
                killed.append(proc)
        if killed:
            psutil.wait_procs(killed, timeout=wait_s)

    def message(self) -> str | None:
        if not self.found:
            return None
        from offloadprobe.core.units import format_bytes

        lines = []
        if self.root in self.found:
            e = self.found[self.root]
            lines.append(
                f"the measured process (pid {e.pid}, {e.command}) left its memory cgroup, "
                f"{format_bytes(e.rss)} resident: what it held from then on is in no figure "
                "(killed)"
            )
        each = "; ".join(
            f"pid {e.pid} ({e.command}), {format_bytes(e.rss)} resident"
            for e in self.found.values()
            if e.pid != self.root
        )
        if each:
            lines.append(
                "a process the strategy started left the worker's memory cgroup, so its "
                f"memory is in no figure: {each} (killed)"
            )
        return "; ".join(lines)
