"""The typed record of one attached job: every call, and what is summed from them.

Bytes are ints; None is "not measured here" (no CUDA in that process, no cgroup), never
zero. Everything the reporters print comes from these records.

A call's host figures have two views: its process's RSS, which the process reads itself
(``host_before_bytes``, ``host_after_bytes``, ``rss_peak_bytes``), and the process's own
memory cgroup, which the parent reads while the call waits (``group_*``: it also holds
what RSS never shows, a memfd, tmpfs or /dev/shm the call wrote, a helper's memory).
``host_peak_bytes`` and ``host_growth_bytes`` are the larger of the two: those govern,
and every budget reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from offloadprobe.core.budgets import Breach


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One measured call, as the process that made it recorded it."""

    phase: str
    target: str
    pid: int
    host: str
    rank: int | None
    local_rank: int | None
    node_rank: int | None
    index: int
    """1 for the first call of this phase in this process, 2 for the next, ..."""
    depth: int
    """Wrapped calls open around this one in its process (0: outermost)."""
    parent: tuple[str, int] | None
    """(phase, index) of the innermost call around this one."""
    thread: str
    start_time: float
    """Seconds since the epoch, at entry."""
    seconds: float
    raised: bool
    error: str | None
    host_before_bytes: int
    """RSS at entry."""
    host_after_bytes: int
    """RSS at exit."""
    rss_peak_bytes: int
    """The call's peak RSS less its starting RSS."""
    host_peak_method: str
    """``vmhwm`` (exact) or ``sampled`` (1 ms polling: may miss short peaks)."""
    group_before_bytes: int | None = None
    """The process's own memory cgroup at entry: charged bytes less page cache, read by
    the parent (None: no cgroup, or the parent was not reached)."""
    group_after_bytes: int | None = None
    """... at exit."""
    group_peak_bytes: int | None = None
    """The group's highest held bytes over the call less ``group_before_bytes`` (None:
    not known, see ``attach/meter.py``)."""
    pinned_source: str | None = None
    pinned_before_bytes: int | None = None
    pinned_after_bytes: int | None = None
    pinned_in_use_after_bytes: int | None = None
    gpu_device: int | None = None
    gpu_allocated_before_bytes: int | None = None
    gpu_allocated_after_bytes: int | None = None
    gpu_reserved_before_bytes: int | None = None
    gpu_reserved_after_bytes: int | None = None
    gpu_allocated_peak_bytes: int | None = None
    gpu_reserved_peak_bytes: int | None = None
    gpu_driver_used_before_bytes: int | None = None
    gpu_driver_used_after_bytes: int | None = None
    node_usage_after_bytes: int | None = None
    """The job cgroup's usage at the call's exit (read by the parent)."""
    node_peak_after_bytes: int | None = None
    """The job cgroup's high-water mark at the call's exit (exact, whole job so far; read
    by the parent)."""

    @property
    def group_growth_bytes(self) -> int | None:
        if self.group_before_bytes is None or self.group_after_bytes is None:
            return None
        return self.group_after_bytes - self.group_before_bytes

    @property
    def group_rise_bytes(self) -> int | None:
        """The cgroup view of the peak: its peak over the start where known, else at
        least its growth."""
        if self.group_peak_bytes is not None:
            return self.group_peak_bytes
        return self.group_growth_bytes

    @property
    def host_peak_bytes(self) -> int:
        """The call's host peak over its start: the larger of the RSS and cgroup views."""
        rise = self.group_rise_bytes
        return self.rss_peak_bytes if rise is None else max(self.rss_peak_bytes, rise)

    @property
    def host_peak_by(self) -> str | None:
        """Which view governs the peak: ``RSS`` or ``cgroup``; None without a cgroup view."""
        rise = self.group_rise_bytes
        if rise is None:
            return None
        return "cgroup" if rise > self.rss_peak_bytes else "RSS"

    @property
    def rss_growth_bytes(self) -> int:
        """RSS after less RSS before."""
        return self.host_after_bytes - self.host_before_bytes

    @property
    def host_growth_bytes(self) -> int:
        """After less before: the larger of the RSS and cgroup views."""
        group = self.group_growth_bytes
        rss = self.rss_growth_bytes
        return rss if group is None else max(rss, group)

    @property
    def device_moved_bytes(self) -> int | None:
        """Device bytes the call freed (an offload) or took (a load): the change of
        PyTorch's allocated bytes; None where not measured."""
        before, after = self.gpu_allocated_before_bytes, self.gpu_allocated_after_bytes
        if before is None or after is None:
            return None
        return abs(after - before)

    @property
    def label(self) -> str:
        """``phase #index`` with its rank (or pid), for the report."""
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{self.phase} #{self.index} ({who})"

    def to_json(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        doc["parent"] = list(self.parent) if self.parent else None
        doc["host_peak_bytes"] = self.host_peak_bytes
        doc["host_peak_by"] = self.host_peak_by
        doc["host_growth_bytes"] = self.host_growth_bytes
        doc["device_moved_bytes"] = self.device_moved_bytes
        return doc

    @classmethod
    def from_stream(cls, doc: dict[str, Any]) -> Call:
        """The call as its process recorded it: the figures only the parent reads (the
        cgroups') are never taken from the job's own stream."""
        names = {f.name for f in fields(cls)} - PARENT_KEYS
        values = {k: v for k, v in doc.items() if k in names}
        parent = values.get("parent")
        values["parent"] = (str(parent[0]), int(parent[1])) if parent else None
        return cls(**values)


PARENT_KEYS = frozenset(
    {
        "group_before_bytes",
        "group_after_bytes",
        "group_peak_bytes",
        "node_usage_after_bytes",
        "node_peak_after_bytes",
    }
)
"""``Call`` fields the parent fills from its own readings (``collect.py``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Process:
    """A process that loaded the bootstrap, from its stream."""

    pid: int
    ppid: int | None
    host: str
    how: str
    """``sitecustomize``, ``verl.plugins`` or ``fork``."""
    argv: tuple[str, ...]
    rank: int | None
    local_rank: int | None
    started: float
    exited: bool
    """Whether it wrote its ``exit`` record (not: killed, or ended by ``os._exit``)."""
    calls: int
    wrapped: tuple[str, ...]
    """Phases wrapped in this process."""
    skipped: tuple[tuple[str, str], ...]
    """(phase, reason) for the targets it could not wrap."""

    @property
    def command(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True, kw_only=True, slots=True)
class Uninstrumented:
    """A Python process (one program image of it) in the job's tree that never loaded
    the bootstrap."""

    pid: int
    ppid: int | None
    command: str
    seen_by: str
    """``process tree`` (the parent's polling of its children) and/or ``cgroup``."""
    after_exec: bool = False
    """A new image executed in a process whose earlier image was instrumented (an
    ``os.execv`` that dropped the bootstrap's variables): its calls are in no record."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Escaped:
    """A process of the job found outside the memory cgroup it was measured in."""

    pid: int
    command: str
    left: str
    """The group it had to stay inside: its own, or the job's."""
    found_in: str
    rss_bytes: int
    """Its RSS when found: memory in no figure from then on."""


CALLED, NEVER_CALLED, MODULE_NEVER_IMPORTED = "called", "never called", "module never imported"
NOT_WRAPPED = "not wrapped: "
"""A phase's status: one of the three, or ``not wrapped: <reason>``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseSummary:
    """Every call of one phase name, across the job."""

    name: str
    target: str
    preset: str | None
    status: str
    """``called``, ``never called`` (its module was imported, its function never
    called), ``module never imported``, or ``not wrapped: <reason>``."""
    calls: int = 0
    raised: int = 0
    worst: Call | None = None
    """The call with the highest host peak over its start."""
    host_after_max_bytes: int | None = None
    pinned_after_max_bytes: int | None = None
    gpu_left_max_bytes: int | None = None
    """Highest PyTorch-allocated device bytes at a call's exit."""
    node_peak_bytes: int | None = None
    """The job cgroup's high-water mark at the last of these calls' exits."""
    seconds_total: float = 0.0

    @property
    def unmeasured(self) -> bool:
        """Whether this phase could not be measured at all (see ``status``)."""
        return self.status == MODULE_NEVER_IMPORTED or self.status.startswith(NOT_WRAPPED)


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSummary:
    """The calls of one rank (or of one process without a rank)."""

    rank: int | None
    host: str
    pids: tuple[int, ...]
    calls: int
    worst: Call | None
    host_after_max_bytes: int | None
    pinned_after_max_bytes: int | None
    gpu_left_max_bytes: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseGrowth:
    """One phase's calls in one rank (or one process without a rank), first to last: what
    a job that creeps each cycle shows, where no single call grows much."""

    phase: str
    rank: int | None
    host: str
    pids: tuple[int, ...]
    calls: int
    host_growth_bytes: int | None
    """Host after the last call less after the first (the larger of RSS and, for one
    process's calls, its cgroup's held bytes); None for a single call."""
    pinned_growth_bytes: int | None
    """Pinned bytes (``pinned_after_bytes``) after the last call less after the first;
    None for a single call, or where pinned bytes were not measured at both."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSummary:
    """One host of the job."""

    host: str
    processes: int
    calls: int
    worst: Call | None
    node_peak_bytes: int | None
    """The job cgroup's peak (this host only: where ``attach`` ran), exact."""
    node_peak_method: str
    """``cgroup v1 memory.max_usage_in_bytes``, ``cgroup v2 memory.peak``, ``process
    tree RSS (sampled)`` or ``not measured``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRecord:
    """One attached job, collected after it ended."""

    command: tuple[str, ...]
    exit_code: int
    """The job's own exit status; -N when signal N ended it."""
    seconds: float
    out_dir: str | None
    """Where the job file and the streams are (None once removed)."""
    calls: tuple[Call, ...]
    phases: tuple[PhaseSummary, ...]
    ranks: tuple[RankSummary, ...]
    nodes: tuple[NodeSummary, ...]
    processes: tuple[Process, ...]
    uninstrumented: tuple[Uninstrumented, ...]
    growth: tuple[PhaseGrowth, ...] = ()
    """Per phase and rank, first call to last."""
    notes: tuple[str, ...] = ()
    breaches: tuple[Breach, ...] = ()
    """Every verb's breach (``core.budgets``): ``strategy`` is the call's label
    (``phase #index (rank r)``) or the node."""
    budgets: tuple[str, ...] = ()
    """The budgets the job was held to, as the user gave them (``--max-host-peak 40GiB``)."""
    unjudged: tuple[str, ...] = ()
    """Budgets that could not be applied to some calls (nothing measured to judge by)."""
    require_calls: bool = False
    escaped: tuple[Escaped, ...] = ()
    """Processes that left their memory cgroup while the job ran: the figures miss them."""
    peak_resets: tuple[str, ...] = ()
    """cgroups whose peak read lower than the parent had left it: reset inside the job."""
    interrupted: int | None = None
    """The signal attach itself received and passed on to the job, where the job then
    failed (None: attach was not stopped, or the job still exited 0)."""

    @property
    def uninstrumented_fails(self) -> bool:
        """With ``--require-calls``, a Python process that ran unmeasured fails the job."""
        return self.require_calls and bool(self.uninstrumented)

    @property
    def never_called(self) -> tuple[PhaseSummary, ...]:
        return tuple(p for p in self.phases if p.calls == 0)

    @property
    def unmeasured(self) -> tuple[PhaseSummary, ...]:
        """Named phases nothing could be measured of: the function was not found or not
        wrapped, or its module was never imported (a misspelt name, most often)."""
        return tuple(p for p in self.phases if p.unmeasured)

    @property
    def nothing_named(self) -> bool:
        """No phase named (no --phase, no --preset) and no ``offloadprobe.phase`` block
        recorded: nothing was looked for, so nothing can be called ok."""
        return not self.phases

    @property
    def job_ok(self) -> bool:
        return self.exit_code == 0
