"""The job's processes as the parent sees them: polled while the job runs.

Every ``interval_s`` the watcher lists the job's process and its descendants (psutil)
and, where the job has a memory cgroup, every pid in its ``cgroup.procs`` (which also
holds processes that left the tree, a daemon that double-forked). It keeps each Python
process it saw (by its executable's or first argument's name) and, where there is no
cgroup, the highest sum of the tree's RSS (sampled: it can miss a short peak). A process
that lived less than one interval may go unseen; one that loaded the bootstrap still
shows in its own stream.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True, kw_only=True, slots=True)
class Seen:
    """A process of the job's tree, as first seen."""

    pid: int
    ppid: int | None
    command: str
    python: bool
    seen_by: str


def is_python(exe: str, cmdline: list[str]) -> bool:
    """An interpreter: its executable, or its first argument, is named python*."""
    names = [os.path.basename(exe)] + ([os.path.basename(cmdline[0])] if cmdline else [])
    return any(name.startswith("python") for name in names)


class TreeWatcher(threading.Thread):
    """Polls the job's tree until stopped."""

    def __init__(self, root_pid: int, *, procs_file: Path | None, interval_s: float = 0.05):
        super().__init__(name="offloadprobe-tree", daemon=True)
        self.root_pid = root_pid
        self.procs_file = procs_file
        self.interval_s = interval_s
        self.seen: dict[int, Seen] = {}
        self.rss_peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while True:
            self.poll()
            if self._stop_event.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def poll(self) -> None:
        procs: dict[int, tuple[psutil.Process, str]] = {}
        try:
            root = psutil.Process(self.root_pid)
            procs[root.pid] = (root, "process tree")
            for child in root.children(recursive=True):
                procs[child.pid] = (child, "process tree")
        except psutil.Error:
            pass
        for pid in self._cgroup_pids():
            if pid not in procs:
                try:
                    procs[pid] = (psutil.Process(pid), "cgroup")
                except psutil.Error:
                    continue
        rss = 0
        for proc, how in procs.values():
            try:
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            self._update(proc, how)
        self.rss_peak = max(self.rss_peak, rss)

    def _cgroup_pids(self) -> list[int]:
        if self.procs_file is None:
            return []
        try:
            return [int(p) for p in self.procs_file.read_text().split()]
        except (OSError, ValueError):
            return []

    def _update(self, proc: psutil.Process, how: str) -> None:
        """What the process is now: a child seen between its fork and its exec is still a
        copy of its parent, so every poll looks again and keeps the latest."""
        try:
            cmdline = proc.cmdline()
            ppid = proc.ppid()
        except (psutil.Error, OSError):
            return
        try:
            exe = proc.exe() or ""
        except (psutil.Error, OSError):
            exe = ""
        known = self.seen.get(proc.pid)
        self.seen[proc.pid] = Seen(
            pid=proc.pid,
            ppid=ppid,
            command=" ".join(cmdline) or (known.command if known else ""),
            # mid-exec its cmdline and exe can read empty: keep what an earlier poll saw
            # (the new image's exe can read before its cmdline: then it is the answer)
            python=is_python(exe, cmdline)
            or bool(known and known.python and not cmdline and not exe),
            seen_by=known.seen_by if known else how,
        )
