"""Memory cgroups, the one module that knows them: find this process's group, make a
group of our own, limit, read, reset the peak of and remove it, on cgroup v1 and v2.

Used by the per-worker groups, the node group of a run over several ranks, ``repro``'s
limited groups, ``attach``'s job group, and the probes that read a group around a phase.

The group is made under this process's own memory cgroup (found in ``/proc/self/cgroup``),
so it needs a writable hierarchy there: root, or a delegated subtree.

* cgroup v1: ``<mount>/memory/<our path>/<name>``; limit ``memory.limit_in_bytes`` and,
  where swap accounting exists, ``memory.memsw.limit_in_bytes`` (memory + swap, set to
  the same value: no swap); usage ``memory.usage_in_bytes``; OOM kills from
  ``memory.oom_control``'s ``oom_kill``; ``memory.failcnt``.
* cgroup v2: ``<mount>/<our path>/<name>``; limit ``memory.max`` with ``memory.swap.max``
  = 0; usage ``memory.current``; OOM kills from ``memory.events``'s ``oom_kill``. Our
  cgroup must list ``memory`` in ``cgroup.subtree_control``; where it does not and
  cannot (it holds processes itself), no group can be made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from offloadprobe.measure.cgroup_files import CgroupFiles as CgroupFiles  # re-exported
from offloadprobe.measure.cgroup_files import PeakCounter as PeakCounter
from offloadprobe.measure.cgroup_files import read_int as read_int

CGROUP_ROOT = Path("/sys/fs/cgroup")


PF_EXITING = 0x4
"""The kernel's flag of a process that has begun to exit (``/proc/PID/stat`` field 9)."""

NO_LIMIT = 1 << 60
"""v1 reports no limit as a huge number near 2**63."""


def version_at(path: Path) -> int:
    """1 or 2: which hierarchy the group at ``path`` belongs to, from its files."""
    return 2 if (path / "memory.current").exists() else 1


class CgroupUnavailable(Exception):
    """No memory cgroup can be made here; the message says why."""


@dataclass(frozen=True, slots=True)
class MemoryGroup:
    """One memory cgroup this process created."""

    version: int
    path: Path
    note: str | None = None
    """What had to be done to make the group (said in the output), if anything."""

    @classmethod
    def at(cls, path: Path | str) -> MemoryGroup:
        """The group at ``path``, its version read from the files there."""
        path = Path(path)
        return cls(version_at(path), path)

    @property
    def procs(self) -> Path:
        """Write a pid here to move that process into the group."""
        return self.path / "cgroup.procs"

    def join(self, pid: int | None = None) -> None:
        """Move ``pid`` (this process by default) into the group."""
        self.procs.write_text(str(pid if pid is not None else os.getpid()))

    def holds(
        self, pid: int, *, proc: Path = Path("/proc"), root: Path = CGROUP_ROOT
    ) -> bool | None:
        """Whether process ``pid`` is in this group or a group below it, read from its
        ``/proc/PID/cgroup`` (the kernel's, out of the process's reach); None where that
        cannot be told (the process is gone or has exited, or the group is not under
        ``root``)."""
        try:
            text = (proc / str(pid) / "cgroup").read_text()
            fields = (proc / str(pid) / "stat").read_text().rpartition(")")[2].split()
            exiting = fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING
        except (OSError, IndexError, ValueError):
            return None
        if exiting:  # v1 names the root group for a process on its way out: it is gone
            return None
        mine = self.relative(root)
        member = member_path(text, self.version)
        if mine is None or member is None:
            return None
        return member == mine or member.startswith(mine.rstrip("/") + "/")

    def relative(self, root: Path = CGROUP_ROOT) -> str | None:
        """The group's path as ``/proc/PID/cgroup`` names it (v1: under the memory
        hierarchy; v2: under the unified one, ``unified/`` on a hybrid host)."""
        mounts = [root / "memory"] if self.version == 1 else [root / "unified", root]
        for mount in mounts:
            with contextlib.suppress(ValueError):
                inside = self.path.relative_to(mount).as_posix()
                return "/" if inside == "." else "/" + inside
        return None

    def pids(self) -> list[int]:
        """The processes in the group now, and in every group below it (a rank's group
        below its node's: the node's processes are all of them)."""
        found = []
        for group in self.subtree():
            try:
                found += [int(p) for p in group.procs.read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def subtree(self) -> list[MemoryGroup]:
        """This group and every group below it, each before its parent (the order they
        can be removed in)."""
        below: list[MemoryGroup] = []
        try:
            children = sorted(p for p in self.path.iterdir() if (p / "cgroup.procs").is_file())
        except OSError:
            children = []
        for child in children:
            below += MemoryGroup(self.version, child).subtree()
        return [*below, self]

    def limit(self) -> int | None:
        """The group's memory limit, or None where it has none."""
        try:
            text = self._file("memory.limit_in_bytes", "memory.max").read_text().strip()
        except OSError:
            return None
        if text == "max" or int(text) >= NO_LIMIT:
            return None
        return int(text)

    def stat(self) -> dict[str, int]:
        """The ``memory.stat`` counters, bytes (v1's ``total_*`` hierarchy figures where it
        has them: the group and every group below it)."""
        found: dict[str, int] = {}
        try:
            lines = (self.path / "memory.stat").read_text().splitlines()
        except OSError:
            return found
        for line in lines:
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                found[key] = int(value)
        if self.version == 1:
            found.update(
                {k.removeprefix("total_"): v for k, v in found.items() if k.startswith("total_")}
            )
        return found

    def peak_counter(self) -> PeakCounter:
        """The group's high-water mark, resettable where the kernel allows it."""
        return PeakCounter(self.files)

    @property
    def files(self) -> CgroupFiles:
        if self.version == 1:
            return CgroupFiles(
                1, self.path / "memory.usage_in_bytes", self.path / "memory.max_usage_in_bytes"
            )
        peak = self.path / "memory.peak"
        return CgroupFiles(2, self.path / "memory.current", peak if peak.exists() else None)

    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version == 1 else v2)

    def usage(self) -> int:
        """Bytes charged to the group now."""
        return int(self._file("memory.usage_in_bytes", "memory.current").read_text().split()[0])

    def peak(self) -> int | None:
        """The group's usage high-water mark (v1: since the last reset; v2: since creation)."""
        try:
            path = self._file("memory.max_usage_in_bytes", "memory.peak")
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def set_limit(self, nbytes: int) -> list[str]:
        """Cap the group at ``nbytes`` with no swap; returns the files written."""
        if self.version == 1:
            written = [self._write("memory.limit_in_bytes", nbytes)]
            if (self.path / "memory.memsw.limit_in_bytes").exists():
                written.append(self._write("memory.memsw.limit_in_bytes", nbytes))
            return written
        written = [self._write("memory.max", nbytes)]
        if (self.path / "memory.swap.max").exists():
            written.append(self._write("memory.swap.max", 0))
        return written

    def lift_limit(self) -> None:
        """Remove the limit again (memory + swap first on v1: it must stay >= memory)."""
        if self.version == 1:
            if (self.path / "memory.memsw.limit_in_bytes").exists():
                self._write("memory.memsw.limit_in_bytes", -1)
            self._write("memory.limit_in_bytes", -1)
        else:
            (self.path / "memory.max").write_text("max")

    def _write(self, name: str, value: int) -> str:
        (self.path / name).write_text(str(value))
        return f"{name} = {value}"

    def oom_kills(self) -> int | None:
        """OOM kills the kernel recorded in this group and the groups below it (None where
        it keeps no counter). v2's ``memory.events`` counts the whole subtree already;
        v1 counts a kill only in the victim's own group (a rank's, below the node's
        limited group), so the subtree's counters are added up."""
        here = self._oom_kills_here()
        if self.version == 2 or here is None:
            return here
        return sum(g._oom_kills_here() or 0 for g in self.subtree())

    def _oom_kills_here(self) -> int | None:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return None
        return None

    def failcnt(self) -> int | None:
        """v1: how often usage hit the limit; v2: ``memory.events`` ``max``."""
        try:
            if self.version == 1:
                return int((self.path / "memory.failcnt").read_text().split()[0])
            for line in (self.path / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError, IndexError):
            return None
        return None

    def kill(self) -> None:
        """SIGKILL every process in the group and the groups below it (v2 ``cgroup.kill``
        where the kernel has it), e.g. ranks left behind when their launcher was killed
        for a timeout."""
        kill_file = self.path / "cgroup.kill"
        try:
            if self.version == 2 and kill_file.exists():
                kill_file.write_text("1")
                return
        except OSError:
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, timeout_s: float = 5.0) -> None:
        """Remove the group, the groups below it first, once their processes are gone
        (retries while the kernel is busy)."""
        for group in self.subtree():
            group._remove_one(timeout_s)

    def _remove_one(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as err:
                if err.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def mechanism(self) -> str:
        """The limit files in words, for the output."""
        if self.version == 1:
            swap = (
                " + memory.memsw.limit_in_bytes"
                if (self.path / "memory.memsw.limit_in_bytes").exists()
                else ""
            )
            return f"cgroup v1 memory.limit_in_bytes{swap}, a new group under {self.path.parent}"
        return f"cgroup v2 memory.max + memory.swap.max=0, a new group under {self.path.parent}"


def member_path(text: str, version: int) -> str | None:
    """A process's memory cgroup path in one hierarchy, from its ``/proc/PID/cgroup``
    text: v1 the line whose controllers list ``memory``, v2 the ``0::`` line."""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == 1 and "memory" in controllers.split(","):
            return path
        if version == 2 and hierarchy == "0" and not controllers:
            return path
    return None


def _own_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """(v1 memory path, v2 path) of this process, from ``/proc/self/cgroup``."""
    v1 = v2 = None
    for line in proc_cgroup.read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif hierarchy == "0":
            v2 = path
    return v1, v2


def _v2_base(root: Path, path: str) -> Path | None:
    for base in (root / path.lstrip("/"), root / "unified" / path.lstrip("/")):
        if (base / "cgroup.controllers").exists():
            return base
    return None


def create_group(
    name: str, *, proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> MemoryGroup:
    """Make an empty memory cgroup ``name`` under ours; ``CgroupUnavailable`` says why not."""
    try:
        v1_path, v2_path = _own_paths(proc_cgroup)
    except OSError as err:
        raise CgroupUnavailable(f"cannot read {proc_cgroup}: {err.strerror}") from None
    if v1_path is not None and (root / "memory").is_dir():
        base = root / "memory" / v1_path.lstrip("/")
        return MemoryGroup(1, _mkdir(base / name, base, "memory.limit_in_bytes"))
    if v2_path is None:
        raise CgroupUnavailable("this process is in no memory cgroup (see /proc/self/cgroup)")
    base = _v2_base(root, v2_path)
    if base is not None and base.name == REST:  # an earlier call moved us here already
        base = base.parent
    if base is None or "memory" not in (base / "cgroup.controllers").read_text().split():
        raise CgroupUnavailable(f"the cgroup v2 memory controller is not available at {base}")
    subtree = base / "cgroup.subtree_control"
    note = None
    if "memory" not in subtree.read_text().split():
        note = enable_memory_below(base)
    group = MemoryGroup(2, _mkdir(base / name, base, "memory.max"))
    return MemoryGroup(2, group.path, note) if note else group


def enable_memory_below(base: Path) -> str | None:
    """Turn the v2 memory controller on for the groups below ``base``; where processes of
    ``base`` itself hold it off (EBUSY, as root), move them into a group beside ours and
    say so (the note); ``CgroupUnavailable`` where neither works."""
    subtree = base / "cgroup.subtree_control"
    try:
        subtree.write_text("+memory")
    except OSError as err:
        if err.errno != errno.EBUSY or os.geteuid() != 0:
            raise CgroupUnavailable(
                f"cannot enable the memory controller for children of {base} ({err.strerror})"
            ) from None
        return _delegate(base, subtree)
    return None


def home_procs(group: MemoryGroup) -> Path:
    """Where a process leaves ``group`` to: the group above it, or on cgroup v2, where that
    group delegates the memory controller (and so may hold no process), its leaf ``REST``."""
    parent = group.path.parent
    if group.version == 2 and (parent / REST).is_dir():
        return parent / REST / "cgroup.procs"
    return parent / "cgroup.procs"


REST = "offloadprobe-rest"
"""cgroup v2: the leaf the processes of our own group move to, so that the group may hand
the memory controller to children (a v2 group that holds processes cannot)."""


def _delegate(base: Path, subtree: Path) -> str:
    """Move every process of ``base`` into ``base/REST`` (still under ``base`` and its
    limits), then enable the memory controller for ``base``'s children. Root only."""
    rest = base / REST
    rest.mkdir(exist_ok=True)
    moved = 0
    for _ in range(5):  # processes that fork meanwhile land in base: sweep again
        pids = (base / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            try:
                (rest / "cgroup.procs").write_text(pid)
                moved += 1
            except OSError as err:
                if err.errno != errno.ESRCH:  # gone meanwhile: nothing to move
                    raise CgroupUnavailable(
                        f"cannot move process {pid} of {base} into {rest} ({err.strerror}) "
                        "to delegate the memory controller"
                    ) from None
    try:
        subtree.write_text("+memory")
    except OSError as err:
        raise CgroupUnavailable(
            f"cannot enable the memory controller for children of {base} even after moving "
            f"its processes into {rest} ({err.strerror})"
        ) from None
    return (
        f"cgroup v2: moved {moved} process(es) of {base} into {REST} below it (same limits) "
        "so that it may delegate the memory controller"
    )


def _is_empty_group(path: Path) -> bool:
    """A group of that name left behind by an aborted run, with no process in it: reused."""
    try:
        return not (path / "cgroup.procs").read_text().split()
    except OSError:
        return False


def _mkdir(path: Path, base: Path, limit_file: str) -> Path:
    if not os.access(base, os.W_OK):
        why = "not root" if os.geteuid() != 0 else "read-only"
        raise CgroupUnavailable(f"cannot create a memory cgroup under {base} ({why})")
    try:
        path.mkdir(exist_ok=_is_empty_group(path))
    except OSError as err:
        raise CgroupUnavailable(
            f"cannot create a memory cgroup under {base} ({err.strerror})"
        ) from None
    if not (path / limit_file).exists():
        path.rmdir()
        raise CgroupUnavailable(f"{path} has no {limit_file}: no memory controller there")
    return path


def node_group_name(run_id: str) -> str:
    """The node cgroup a launcher makes for the ranks of run ``run_id``."""
    return f"offloadprobe-{run_id}-node"


# ---------------------------------------------------------------- this process's group


def locate(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> CgroupFiles | None:
    """Find this process's memory cgroup files, or None where none is readable."""
    group = own_group(proc_cgroup, root)
    return group.files if group is not None else None


def own_group(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> MemoryGroup | None:
    """The memory cgroup this process is in, or None where none is readable."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = root / "memory" / path.lstrip("/")
            if (base / "memory.usage_in_bytes").exists():
                return MemoryGroup(1, base)
    for line in lines:
        hierarchy, _, path = line.split(":", 2)
        if hierarchy == "0":
            for base in (root / path.lstrip("/"), root / "unified" / path.lstrip("/")):
                if (base / "memory.current").exists():
                    return MemoryGroup(2, base)
    return None
