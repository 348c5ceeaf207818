"""The job's memory cgroups, the parent's side: one for the job, and inside it one for
each process that loads the bootstrap, nested as the processes are.

A process that says hello (``meter.py``) is moved into a group of its own, made inside
the group it is in then. What it and the children it starts (which are born in its
group) charge from then on is that group's: its RSS, the memfds, tmpfs and /dev/shm
pages it writes, its helpers' memory. Two ranks of one job each have their own; a rank's
group holds its DataLoader workers' groups. Memory charged before the move stays where
it was charged (the kernel does not move charges), which is still inside the job's
group. cgroup v1: ``<job>/p<pid>``, the process in it. cgroup v2, where a group that
hands the memory controller to children may hold no process: ``<job>/p<pid>/leaf``, and
the job's first process starts in ``<job>/leaf``.

Peaks are read, and the process groups' peaks reset, by the parent alone (``meter.py``);
a peak that reads lower than the parent last left it was reset by someone else, and is
counted (``foreign_resets``). Nothing here runs in the job.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from offloadprobe.measure.cgroup import (
    CGROUP_ROOT,
    CgroupUnavailable,
    MemoryGroup,
    PeakCounter,
    create_group,
    home_procs,
    own_group,
)
from offloadprobe.measure.reclaim import page_cache

LEAF = "leaf"
"""cgroup v2: the leaf of a group that holds its process (its children's groups beside)."""


@dataclass(slots=True)
class _Peak:
    """A group's peak counter as the parent left it."""

    counter: PeakCounter
    floor: int = 0
    """The lowest the counter may read now: what it read after the parent's last reset,
    or the highest it read since."""
    resettable: bool = True


@dataclass(frozen=True, slots=True)
class Held:
    """A group's bytes at one moment: charged, and page cache among them."""

    usage: int
    cache: int

    @property
    def held(self) -> int:
        """Charged bytes less page cache (what offload to disk legitimately frees)."""
        return self.usage - self.cache


@dataclass(slots=True)
class JobGroups:
    """The job's group and the process groups made in it."""

    job: MemoryGroup
    note: str | None = None
    own: dict[int, tuple[int, MemoryGroup]] = field(default_factory=dict)
    """pid -> (its start time, the group made for it)."""
    foreign_resets: list[str] = field(default_factory=list)
    """Groups whose peak read lower than the parent had left it (reset in the job)."""
    node_max: int = 0
    """The job group's highest peak read so far."""
    _peaks: dict[Path, _Peak] = field(default_factory=dict)
    _fds: dict[Path, int] = field(default_factory=dict)
    _fds_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def make(cls, job_id: str) -> tuple[JobGroups | None, str | None]:
        """The job's group, or None and why not (said in the output)."""
        try:
            job = create_group(f"offloadprobe-attach-{job_id}")
        except CgroupUnavailable as exc:
            return None, str(exc)
        groups = cls(job=job, note=job.note)
        if job.version == 2:
            try:
                _delegating(job.path)
                (job.path / LEAF).mkdir()
            except OSError as exc:
                groups.close([])
                return None, f"cannot nest groups in {job.path} ({exc.strerror})"
        return groups, job.note

    @property
    def method(self) -> str:
        name = "memory.max_usage_in_bytes" if self.job.version == 1 else "memory.peak"
        return f"cgroup v{self.job.version} {name}"

    @property
    def entry(self) -> Path:
        """The ``cgroup.procs`` the job's first process joins."""
        leaf = self.job.path / LEAF
        return (leaf if self.job.version == 2 else self.job.path) / "cgroup.procs"

    # ------------------------------------------------------------ where processes are

    @staticmethod
    def where(pid: int) -> Path | None:
        """The memory cgroup ``pid`` is in now (None: gone, or not readable)."""
        group = own_group(Path(f"/proc/{pid}/cgroup"))
        return group.path if group is not None else None

    def home_of(self, pid: int, started: int | None, born: Path | None = None) -> Path:
        """The group ``pid`` must stay inside: its own where one was made for it (the same
        process: the same start time), else the one it was first seen in (``born``:
        where its parent's memory is measured), else the job's."""
        mine = self.own.get(pid)
        if mine is not None and (started is None or mine[0] == started):
            return mine[1].path
        if born is not None and inside(born, self.job.path):
            return born.parent if self.job.version == 2 and born.name == LEAF else born
        return self.job.path

    def pids(self) -> list[int]:
        """Every process in the job's group or a group below it."""
        found: list[int] = []
        for folder, _, _ in os.walk(self.job.path):
            try:
                found += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def place(self, pid: int, started: int, now: Path | None = None) -> MemoryGroup | None:
        """Move ``pid`` into a group of its own, made in the group it is in ``now`` (read
        from /proc where not given: inside the job's); None where it is elsewhere or the
        kernel refuses."""
        now = now if now is not None else self.where(pid)
        if now is None or not inside(now, self.job.path):
            return None
        owner = now.parent if self.job.version == 2 and now.name == LEAF else now
        path = owner / f"p{pid}"
        try:
            with contextlib.suppress(FileExistsError):  # a pid the kernel reused
                path.mkdir()
            if self.job.version == 2:
                _delegating(path)
                (path / LEAF).mkdir(exist_ok=True)
                (path / LEAF / "cgroup.procs").write_text(str(pid))
            else:
                (path / "cgroup.procs").write_text(str(pid))
        except OSError:
            return None
        group = MemoryGroup(self.job.version, path)
        with self._lock:
            self.own[pid] = (started, group)
            self._peaks[path] = _Peak(PeakCounter(group.files))
        return group

    # ------------------------------------------------------------ readings

    def held(self, group: MemoryGroup) -> Held | None:
        usage = self.usage(group)
        return None if usage is None else Held(usage=usage, cache=self.cache(group))

    def usage(self, group: MemoryGroup) -> int | None:
        return _int(self._read(group.files.current))

    def cache(self, group: MemoryGroup) -> int:
        """Page cache charged to the group (shared memory is not: it is held)."""
        stat: dict[str, int] = {}
        for line in (self._read(group.path / "memory.stat") or b"").decode().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                stat[key] = int(value)
        if group.version == 1:  # the hierarchy's totals: the group and those below it
            stat.update({k[6:]: v for k, v in stat.items() if k.startswith("total_")})
        return page_cache(stat) or 0

    def _read(self, path: Path | None) -> bytes | None:
        """A cgroup file, read through a descriptor kept open (a call waits on this)."""
        if path is None:
            return None
        try:
            with self._fds_lock:  # the meter's thread and the watcher's both read
                fd = self._fds.get(path)
                if fd is None:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY)
            return os.pread(fd, 1 << 14, 0)
        except OSError:
            return None

    def peak(self, group: MemoryGroup) -> int | None:
        """The group's peak as its counter reads now (checked against its floor)."""
        with self._lock:
            state = self._peaks.get(group.path)
            if state is None:
                return None
            value = (
                _int(self._read(group.files.peak)) if group.version == 1 else state.counter.peak()
            )
            if value is None:
                return value
            if value < state.floor:
                self.foreign_resets.append(group.path.name)
            state.floor = max(state.floor, value)
            return value

    def reset(self, group: MemoryGroup) -> int | None:
        """Reset the group's peak to its usage now; the peak after (None: not reset)."""
        with self._lock:
            state = self._peaks.get(group.path)
            if state is None or not state.resettable or not state.counter.reset():
                if state is not None:
                    state.resettable = False
                return None
            peak = group.files.peak
            value = _int(self._read(peak)) if group.version == 1 else state.counter.peak()
            state.floor = value or 0
            return value

    def node(self) -> tuple[int | None, int | None]:
        """The job group's usage and peak now (the peak checked: the parent never resets
        it, so a peak lower than one read before was reset in the job)."""
        with self._lock:  # read and compared in one step: two threads read it
            usage = _int(self._read(self.job.files.current))
            peak = _int(self._read(self.job.files.peak))
            if peak is not None:
                if peak < self.node_max:
                    self.foreign_resets.append(self.job.path.name)
                self.node_max = max(self.node_max, peak)
        return usage, peak

    # ------------------------------------------------------------ the end

    def close(self, notes: list[str]) -> int | None:
        """The job's peak (the highest read), then every group removed; processes left
        in them are moved out first, and said in the notes."""
        _, peak = self.node()
        deadline = time.monotonic() + 5.0
        while (left := self.pids()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            notes.append(
                f"{len(left)} process(es) of the job outlived it (pid "
                f"{', '.join(str(p) for p in left[:8])}): moved out of its cgroup, still running"
            )
            for pid in left:
                with contextlib.suppress(OSError):
                    home_procs(self.job).write_text(str(pid))
        for state in self._peaks.values():
            state.counter.close()
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        for folder, _, _ in os.walk(self.job.path, topdown=False):
            _rmdir(Path(folder))
        return max(self.node_max, peak or 0) or None


def _int(data: bytes | None) -> int | None:
    try:
        return int(data.split()[0]) if data else None
    except (ValueError, IndexError):
        return None


def inside(path: Path, group: Path) -> bool:
    return path == group or group in path.parents


def shown(path: Path) -> str:
    """A group's path as ``/proc/PID/cgroup`` writes it (from its hierarchy's root)."""
    for mount in (CGROUP_ROOT / "memory", CGROUP_ROOT / "unified", CGROUP_ROOT):
        if inside(path, mount):
            rel = path.relative_to(mount).as_posix()
            return "/" if rel == "." else "/" + rel
    return str(path)


def _delegating(path: Path) -> None:
    """cgroup v2: let ``path`` hand the memory controller to groups below it."""
    (path / "cgroup.subtree_control").write_text("+memory")


def _rmdir(path: Path, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                return
            time.sleep(0.05)
