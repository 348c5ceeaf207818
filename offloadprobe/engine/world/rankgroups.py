"""Every rank in a memory cgroup of its own, below the node's group, moved there by its
launcher before any strategy code runs in it.

The launcher (``launch.py``) makes one group per local rank below the node's group
(``RankGroups.make``) before it starts a rank. A rank's first act (a forked rank's in
``forked._settle``, before its pages are made its own; a fresh one's in
``worker.serve``, before torch is imported) is to say its pid in the job folder and wait
(``await_move``). The launcher's mover thread writes that pid into the rank's group,
checks the kernel's list of the group's processes, and answers in the folder; the rank
checks the same list before it goes on. From then on everything the rank holds is
charged to its group, as a single worker's is to its own: its RSS, its helper
processes, the memfds and /dev/shm files it wrote. Its host figures are read from the
group beside its own RSS, the larger governing (``measure.governing``); the node's group
above counts every rank's.

While the ranks run, the mover looks at each rank and everything it started, from
outside: a process seen outside its rank's group twice in a row (it moved itself, and
its memory with it) is recorded, killed at the end, and the run fails as ``escaped``.

Where no group can be made (no node group, no permission, a v2 group that cannot hand
the memory controller down), the ranks are told why: each rank's figures are then its
process tree's RSS, and the node's figure is the one that sees the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from offloadprobe.core.job import write_atomically
from offloadprobe.core.units import format_bytes
from offloadprobe.measure.cgroup import CgroupUnavailable, MemoryGroup
from offloadprobe.measure.subgroups import child_group, holds

WAIT_S = 60.0
"""How long a rank waits for its launcher to move it (a loaded 2-core host included)."""
LOOK_EVERY_S = 0.25
"""How often the launcher looks for a rank's process outside the rank's group."""


def group_name(local_rank: int) -> str:
    """The group of the node's local rank ``local_rank``, below the node's group."""
    return f"rank-local{local_rank}"


def _ask(folder: Path, local_rank: int) -> Path:
    return folder / f"cgroup-ask-local{local_rank}"


def _answer(folder: Path, local_rank: int) -> Path:
    return folder / f"cgroup-moved-local{local_rank}"


@dataclass(frozen=True, slots=True)
class RankGroup:
    """Where one rank's host figures come from: its own group, or why it has none."""

    path: str | None
    missing: str | None = None
    made: str | None = None
    """What had to be done to make the group (cgroup v2 delegation), if anything."""

    @property
    def note(self) -> str:
        """What the rank's host figures cover, for the record's notes."""
        if self.path is not None:
            version = MemoryGroup.at(self.path).version
            made = f"; {self.made}" if self.made else ""
            return (
                f"host figures: each rank's own memory cgroup (v{version}, below the "
                "node's) beside its own RSS, the larger governs; page cache is not "
                f"counted as held{made}"
            )
        return (
            f"host figures of a rank with no memory cgroup of its own ({self.missing}): "
            "its process tree's RSS; what it holds outside its processes (memfds, "
            "/dev/shm) only a node memory cgroup's figure sees"
        )


def _read_answer(folder: Path, local_rank: int, pid: int) -> RankGroup | None:
    try:
        said = json.loads(_answer(folder, local_rank).read_text())
    except (OSError, ValueError):
        return None
    if said.get("pid") != pid:
        return None
    return RankGroup(said.get("path"), said.get("missing"), said.get("made"))


_ANSWERED: dict[tuple[int, str, int], RankGroup] = {}
"""What ``await_move`` found in this process (by pid: a fork asks again)."""


def await_move(folder: Path, local_rank: int, *, wait_s: float = WAIT_S) -> RankGroup:
    """This rank's group, once its launcher moved it there (and the kernel's list says it
    is there), or why it has none. Asked once; later calls give the same answer."""
    pid = os.getpid()
    key = (pid, str(folder), local_rank)
    if key in _ANSWERED:
        return _ANSWERED[key]
    said = _read_answer(folder, local_rank, pid)
    if said is None:
        write_atomically(_ask(folder, local_rank), str(pid))
        deadline = time.monotonic() + wait_s
        while (said := _read_answer(folder, local_rank, pid)) is None:
            if time.monotonic() > deadline:
                why = f"its launcher did not move it into its group within {wait_s:g} s"
                said = RankGroup(None, why)
                break
            time.sleep(0.005)
    if said.path is not None and not holds(MemoryGroup.at(said.path), pid):
        said = RankGroup(None, f"its launcher moved it into {said.path}, but it is not there")
    _ANSWERED[key] = said
    return said


@dataclass(frozen=True, slots=True)
class Escaped:
    local_rank: int
    pid: int
    command: str
    rss: int


class RankGroups:
    """The launcher's side: the node's rank groups, and the thread that moves each rank
    into its own and watches that everything the rank started stays there."""

    def __init__(
        self,
        folder: Path,
        groups: dict[int, MemoryGroup],
        missing: str | None,
        *,
        look_every_s: float = LOOK_EVERY_S,
    ):
        self.folder, self.groups, self.missing = folder, groups, missing
        self.look_every_s = look_every_s
        self.moved: dict[int, int] = {}
        """Local rank -> pid, of each rank moved into its group."""
        self.found: dict[int, Escaped] = {}
        self._seen_outside: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def make(
        cls, folder: Path, node: str | None, node_missing: str | None, nproc: int
    ) -> RankGroups:
        """A group per local rank below the node's group ``node``, or none and why."""
        if node is None:
            return cls(folder, {}, f"no node cgroup: {node_missing or 'none was made'}")
        parent = MemoryGroup.at(node)
        groups: dict[int, MemoryGroup] = {}
        try:
            for local in range(nproc):
                groups[local] = child_group(parent, group_name(local))
        except (CgroupUnavailable, OSError) as err:
            for made in groups.values():
                with contextlib.suppress(OSError):
                    made.remove()
            return cls(folder, {}, str(err))
        made = next((g.note for g in groups.values() if g.note), None)  # the first one's
        return cls(folder, {k: replace(g, note=made) for k, g in groups.items()}, None)

    def start(self) -> RankGroups:
        if self.groups:
            self._thread = threading.Thread(
                target=self._run, name="offloadprobe-rank-groups", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> str | None:
        """Stop watching; kill each process found outside its rank's group; what was
        found, in one line (None: nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for escaped in self.found.values():
            with contextlib.suppress(OSError):
                os.kill(escaped.pid, signal.SIGKILL)
        if not self.found:
            return None
        each = "; ".join(
            f"rank {e.local_rank} (local): pid {e.pid} ({e.command}), "
            f"{format_bytes(e.rss)} resident"
            for e in self.found.values()
        )
        return (
            "a process of a rank left the rank's memory cgroup, so its memory is in none "
            f"of the rank's figures: {each} (killed)"
        )

    def _run(self) -> None:
        waiting = set(self.groups)
        look_at = time.monotonic() + self.look_every_s
        while not self._stop.is_set():
            for local in sorted(waiting):
                try:
                    pid = int(_ask(self.folder, local).read_text())
                except (OSError, ValueError):
                    continue
                self._move(local, pid)
                waiting.discard(local)
            if time.monotonic() >= look_at:
                self._look()
                look_at = time.monotonic() + self.look_every_s
            self._stop.wait(0.005 if waiting else self.look_every_s)

    def _move(self, local: int, pid: int) -> None:
        group = self.groups[local]
        try:
            group.join(pid)
            there = holds(group, pid)
            said = {"pid": pid, "path": str(group.path) if there else None, "made": group.note}
            if not there:
                said["missing"] = f"not in {group.path} after the launcher moved it there"
        except OSError as err:
            said = {
                "pid": pid,
                "path": None,
                "missing": f"cannot move it into {group.path} ({err.strerror})",
            }
        if said["path"] is not None:
            self.moved[local] = pid
        with contextlib.suppress(OSError):  # the job folder is gone: the run is over
            write_atomically(_answer(self.folder, local), json.dumps(said))

    def _look(self) -> None:
        outside_now: set[int] = set()
        for local, pid in self.moved.items():
            try:
                root = psutil.Process(pid)
                family = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            inside = set(self.groups[local].pids())
            for proc in family:
                if proc.pid in inside or proc.pid in self.found:
                    continue
                with contextlib.suppress(psutil.Error):
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue  # ended: the kernel lists it in no group any more
                    if proc.pid in set(self.groups[local].pids()):
                        continue  # joined since the first read
                    outside_now.add(proc.pid)
                    if proc.pid in self._seen_outside:  # twice in a row: not a race
                        line = " ".join(proc.cmdline()).splitlines()
                        command = (line[0][:60] if line else "") or proc.name()
                        rss = proc.memory_info().rss
                        self.found[proc.pid] = Escaped(local, proc.pid, command, rss)
        self._seen_outside = outside_now
