"""The job's processes as the parent sees them: polled while the job runs.

Every ``interval_s`` the watcher lists the job's process and its descendants (psutil)
and, where the job has memory cgroups, every pid in them (which also holds processes
that left the tree, a daemon that double-forked). It keeps each Python process it saw
(by its executable's or first argument's name), one entry per program image
(``images.py``: a process that executes a new image is a new entry under the same pid),
and, where there is no cgroup, the highest sum of the tree's RSS (sampled: it can miss a
short peak). A process that lived less than one interval may go unseen; one that loaded
the bootstrap still shows in its own stream, and one whose connection to the parent
ended is looked at once more right then (``look_at``).

Where there are cgroups it also checks, at every poll, where each process is: inside
the group made for it (a process that said hello), or else inside the group it was first
seen in (where it was born: its parent's, whose calls count its memory), or else the
job's. One found anywhere else moved itself out, and its memory with it: it is kept as
``escaped``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from offloadprobe.attach.groups import JobGroups, inside, shown
from offloadprobe.attach.images import Image, exiting, image_of, started_of
from offloadprobe.attach.records import Escaped


@dataclass(frozen=True, kw_only=True, slots=True)
class Seen:
    """A process of the job's tree, as first seen running one image."""

    pid: int
    ppid: int | None
    command: str
    python: bool
    seen_by: str
    image: str | None = None
    """The image's token (``images.py``); None where it could not be read."""


def is_python(exe: str, cmdline: list[str]) -> bool:
    """An interpreter: its executable, or its first argument, is named python*."""
    names = [os.path.basename(exe)] + ([os.path.basename(cmdline[0])] if cmdline else [])
    return any(name.startswith("python") for name in names)


class TreeWatcher(threading.Thread):
    """Polls the job's tree until stopped."""

    def __init__(
        self,
        root_pid: int,
        *,
        groups: JobGroups | None,
        interval_s: float = 0.05,
        image_reader: Callable[[int], Image | None] = image_of,
    ):
        super().__init__(name="offloadprobe-tree", daemon=True)
        self.image_reader = image_reader
        self.root_pid = root_pid
        self.groups = groups
        self.interval_s = interval_s
        self.seen: dict[tuple[int, str | None], Seen] = {}
        self._last: dict[int, tuple[int, str | None]] = {}
        self.escaped: dict[int, Escaped] = {}
        self._born: dict[tuple[int, int], Path] = {}
        """(pid, start time) -> the group a process was first seen in."""
        self.rss_peak = 0
        self._lock = threading.Lock()
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
        for pid in self.groups.pids() if self.groups is not None else ():
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
            self._check_group(proc)
        self.rss_peak = max(self.rss_peak, rss)
        if self.groups is not None:
            self.groups.node()  # the job group's peak, read (and checked) from here too

    def look_at(self, pid: int) -> None:
        """Look at one process now (its connection to the parent ended)."""
        try:
            self._update(psutil.Process(pid), "process tree")
        except psutil.Error:
            return

    def _check_group(self, proc: psutil.Process) -> None:
        if self.groups is None or proc.pid in self.escaped:
            return
        where = self.groups.where(proc.pid)
        started = started_of(proc.pid)
        if where is None or started is None:
            return
        born = self._born.setdefault((proc.pid, started), where)
        home = self.groups.home_of(proc.pid, started, born)
        if inside(where, home) or exiting(proc.pid):
            return
        try:
            command, rss = " ".join(proc.cmdline()), proc.memory_info().rss
        except psutil.Error:
            command, rss = "", 0
        self.escaped[proc.pid] = Escaped(
            pid=proc.pid, command=command, left=shown(home), found_in=shown(where), rss_bytes=rss
        )

    def _update(self, proc: psutil.Process, how: str) -> None:
        """What the process is now. A child seen between its fork and its exec is still a
        copy of its parent (the same image: ``images.py``); mid-exec its cmdline and exe
        can both read empty (nothing learnt: the poll is skipped), and the new image's
        exe can read before its cmdline (then the exe is the answer)."""
        try:
            cmdline = proc.cmdline()
            ppid = proc.ppid()
        except (psutil.Error, OSError):
            return
        try:
            exe = proc.exe() or ""
        except (psutil.Error, OSError):
            exe = ""
        if not cmdline and not exe:
            return
        python = is_python(exe, cmdline)
        image = self.image_reader(proc.pid) if python else None
        token = image.token if image is not None else None
        with self._lock:
            known = self.seen.get((proc.pid, token))
            self._last[proc.pid] = (proc.pid, token)
            self.seen[(proc.pid, token)] = Seen(
                pid=proc.pid,
                ppid=ppid,
                command=" ".join(cmdline) or (known.command if known else ""),
                python=python,
                seen_by=known.seen_by if known else how,
                image=token,
            )

    def latest(self, pid: int) -> Seen | None:
        """What the last poll that learnt anything of ``pid`` saw."""
        with self._lock:
            key = self._last.get(pid)
            return self.seen.get(key) if key is not None else None
