"""The limit a parent holds on a gated worker's memory cgroup, from each offload to the end
of its load, and what it saw while it held (``core.limits``).

At each offload's start the worker waits at its gate. The parent drops the group's page
cache no process maps (``measure.reclaim``: cache is what the kernel reclaims before it
kills, so cache left charged would be headroom the limit never stated), reads the group's
usage (the first time: the baseline) and sets::

    limit = usage at the first offload (after the drop) + size

At the load's end it reads what the kernel reclaimed meanwhile and whether the limit is
still its own, and lifts it: between a load's end and the next offload (the integrity
check, the next train phase: the framework's work, not the strategy's) there is none.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from offloadprobe.core.limits import HostLimitRecord, LimitSpan
from offloadprobe.core.records import PhaseRecord
from offloadprobe.core.verdicts import LIMITED
from offloadprobe.isolation.escapes import left
from offloadprobe.measure.cgroup import MemoryGroup
from offloadprobe.measure.reclaim import ReclaimCount, count, drop_unmapped, reclaimed


class LimitWindow:
    """Holds ``group`` at ``baseline + size`` from each offload to its load's end."""

    def __init__(self, group: MemoryGroup, size: int) -> None:
        self.group, self.size = group, size
        self.baseline: int | None = None
        self.written: list[str] = []
        self.spans: list[LimitSpan] = []
        self._start: ReclaimCount | None = None
        self._pid: int | None = None
        """The gated worker's process (None: unknown, or this process: a test's worker)."""

    @property
    def limit(self) -> int | None:
        return None if self.baseline is None else self.baseline + self.size

    def __call__(self, info: dict[str, Any]) -> None:
        if info["event"] == "start":
            self.open(int(info.get("cycle") or 0), pid=info.get("pid"))
        else:
            self.close()

    def open(self, cycle: int, *, pid: int | None = None) -> None:
        """The worker waits at an offload's start: drop the cache, set the limit. (A second
        offload before a load, ``--sequence double-offload``, ends the stretch before it.)"""
        if self._start is not None:
            start, self._start = self._start, None
            self._finish_span(start, ended=True)
            self.group.lift_limit()
        dropped = drop_unmapped(self.group)
        usage = self.group.usage()
        if self.baseline is None:
            self.baseline = usage
        assert self.limit is not None
        self._start = count(self.group)
        self.spans.append(
            LimitSpan(
                cycle=cycle,
                dropped_bytes=dropped,
                usage_bytes=usage,
                cache_bytes=self._start.cache,
                limit_bytes=self.limit,
            )
        )
        self._pid = pid if pid != os.getpid() else None  # a worker in this process: tests
        if self._outside():
            self.spans[-1] = replace(self.spans[-1], left_group=True)
        self.written = self.group.set_limit(self.limit)

    def _outside(self) -> bool:
        """The gated worker is not in the group (it moved itself out): the one rule the
        parent's watch of every worker holds too (``isolation.escapes.left``)."""
        return self._pid is not None and left(self.group, self._pid)

    def close(self, *, ended: bool = True) -> None:
        """The worker waits at a load's end (or has ended): what the kernel reclaimed
        meanwhile, the limit as it reads now, whether the worker is still in the group;
        then the limit is lifted."""
        start, self._start = self._start, None
        try:
            if start is not None and self.spans:
                self._finish_span(start, ended=ended)
                if ended and self._outside():
                    self.spans[-1] = replace(self.spans[-1], left_group=True)
        finally:
            self.group.lift_limit()

    def _finish_span(self, start: ReclaimCount, *, ended: bool) -> None:
        end = count(self.group)
        nbytes, exact = reclaimed(start, end)
        hits = None if start.hits is None or end.hits is None else end.hits - start.hits
        after = self.group.limit() if ended else None
        self.spans[-1] = replace(
            self.spans[-1],
            ended=ended,
            cache_after_bytes=end.cache,
            reclaimed_bytes=nbytes,
            reclaim_exact=exact,
            limit_hits=hits,
            limit_after_bytes=after,
            limit_changed=ended and after != self.spans[-1].limit_bytes,
        )

    def finish(self) -> None:
        """After the worker ended: a stretch it never left (killed inside) is read too."""
        if self._start is not None:
            with contextlib.suppress(OSError):  # the group is gone: what was read stays
                self.close(ended=False)

    def record(
        self, errors: list[str] | None = None, phases: Sequence[PhaseRecord] = ()
    ) -> HostLimitRecord:
        """What the limit was and what held it, for the worker's run. Where the kernel
        counts no reclaim (v1), the fall of the page cache is kept only for a stretch
        whose phases' own cgroup peaks (``phases``, the worker's records) reached the
        limit: below it nothing was reclaimed for it."""
        return HostLimitRecord(
            size_bytes=self.size,
            mechanism=self.group.mechanism,
            baseline_bytes=self.baseline,
            spans=[_checked(span, phases) for span in self.spans],
            errors=list(errors or []),
        )


REACHED = 2**20
"""A phase whose cgroup peak came this close to the limit reached it: the kernel charges
in batches (64 pages a CPU) and reclaims a little ahead of the limit."""


def _checked(span: LimitSpan, phases: Sequence[PhaseRecord]) -> LimitSpan:
    if span.reclaim_exact or not span.reclaimed_bytes:
        return span
    peaks = [
        p.cgroup.peak
        for p in phases
        if p.cycle == span.cycle
        and p.phase in LIMITED
        and p.cgroup is not None
        and p.cgroup.peak is not None
        and p.cgroup.peak_is_phase_local
    ]
    if peaks and max(peaks) < span.limit_bytes - REACHED:
        return replace(span, reclaimed_bytes=0)
    return span
