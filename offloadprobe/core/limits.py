"""What a host limit held, as measured by the parent that set it: ``run --host-limit`` and
``repro``'s limited children carry it on their run (``RunRecord.host_limit``, JSON
``host_limit``).

A memory cgroup's limit caps everything charged to the group, page cache too, and at the
limit the kernel reclaims cache before it kills: cache charged when the limit is set is
headroom the limit never stated. So before each limited stretch the page cache no process
maps is dropped (``dropped_bytes``); what stays (the mapped part: libraries the worker
runs, files it maps) is said (``cache_bytes``), and what the kernel reclaimed while the
limit held is counted (``reclaimed_bytes``). Whatever the kernel did, the verdict rule
(``core.verdicts.limit_verdict``) holds the measured host peak of every offload and load
phase to the limit.

Every size is an ``int`` of bytes; ``None`` means "not measured".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from offloadprobe.core.units import format_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitSpan:
    """One stretch under the limit: from a cycle's offload start to its load's end."""

    cycle: int
    dropped_bytes: int
    """Page cache no process mapped, reclaimed at the gate before the limit was set."""
    usage_bytes: int
    """The group's usage when the limit was set (after the drop)."""
    cache_bytes: int
    """Page cache still charged then (mapped): what the kernel could reclaim instead of
    killing."""
    limit_bytes: int
    ended: bool = False
    """The load's end was reached with the limit on (False: the worker was killed, or
    stopped, inside)."""
    cache_after_bytes: int | None = None
    reclaimed_bytes: int | None = None
    """What the kernel reclaimed from the group while the limit held."""
    reclaim_exact: bool = False
    """True: the kernel's own count (cgroup v2 ``pgsteal``); False: the fall of the page
    cache over the stretch, a lower bound (cgroup v1 counts no reclaim)."""
    limit_hits: int | None = None
    """How often a charge found the group at its limit (v1 fail counts, v2 ``max``)."""
    limit_after_bytes: int | None = None
    """The group's limit as read at the load's end, before it was lifted (None: none was
    set then, or it was not read: the worker never got there)."""
    limit_changed: bool = False
    """The limit read at the load's end was not ``limit_bytes``: something else changed
    it (or lifted it) while it held."""
    left_group: bool = False
    """The gated worker was not in the group when the limit was set, or not at the load's
    end: it moved itself out of the limit (and of the group's figures)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostLimitRecord:
    """The limit one worker (or one node of ranks) ran under, and what held it."""

    size_bytes: int
    """What the offload code may add: ``--host-limit SIZE``, or repro's scaled limit."""
    mechanism: str
    """The limit files and the group, in words."""
    baseline_bytes: int | None = None
    """The group's usage at the first offload, after the drop: the limit is this plus
    ``size_bytes`` (None: the worker never reached its first offload)."""
    spans: list[LimitSpan] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """What went wrong setting or lifting the limit (the worker was let go each time)."""

    @property
    def limit_bytes(self) -> int | None:
        return None if self.baseline_bytes is None else self.baseline_bytes + self.size_bytes

    @property
    def dropped_bytes(self) -> int:
        return sum(s.dropped_bytes for s in self.spans)

    @property
    def reclaimed_bytes(self) -> int:
        return sum(s.reclaimed_bytes or 0 for s in self.spans)

    @property
    def reclaim_exact(self) -> bool:
        return all(s.reclaim_exact for s in self.spans if s.reclaimed_bytes is not None)

    def reclaim_words(self) -> str:
        """``the kernel reclaimed 33.00 MiB of page cache`` (``at least`` on cgroup v1)."""
        return reclaim_words(self.reclaimed_bytes, exact=self.reclaim_exact)

    def span(self, cycle: int | None) -> LimitSpan | None:
        """The stretch of ``cycle``, if the limit held in it."""
        return next((s for s in self.spans if s.cycle == cycle), None)

    def note(self, name: str = "host limit") -> str:
        """The limit, the cache dropped before it and the reclaim under it, in words
        (``name``: what the user called the limit, ``--host-limit``)."""
        if self.limit_bytes is None or self.errors:
            why = "; ".join(self.errors) or "the worker never reached its first offload"
            return f"{name} {format_bytes(self.size_bytes)}: no limit was set ({why})"
        assert self.baseline_bytes is not None
        text = (
            f"{name} {format_bytes(self.size_bytes)}: a real limit ({self.mechanism}) of "
            f"{format_bytes(self.limit_bytes)} = the worker's cgroup usage at the first "
            f"offload ({format_bytes(self.baseline_bytes)}) + {format_bytes(self.size_bytes)}, "
            "held from each offload to the end of its load; page cache no process maps "
            f"dropped before each: {format_bytes(self.dropped_bytes)}"
        )
        kept = max((s.cache_bytes for s in self.spans), default=0)
        if kept:
            text += f", mapped page cache left in the group: up to {format_bytes(kept)}"
        hits = sum(s.limit_hits or 0 for s in self.spans)
        if self.reclaimed_bytes or hits:
            reached = f", the limit reached {hits} times" if hits else ""
            text += f"; under the limit {self.reclaim_words()}{reached}"
        else:
            text += "; nothing was reclaimed under the limit"
        return text


def reclaim_words(nbytes: int, *, exact: bool) -> str:
    """``the kernel reclaimed 33.00 MiB of page cache`` (``at least``: a lower bound)."""
    bound = "" if exact else "at least "
    return f"the kernel reclaimed {bound}{format_bytes(nbytes)} of page cache"


def limit_from_dict(data: dict[str, Any] | None) -> HostLimitRecord | None:
    """Rebuild a ``HostLimitRecord`` from its JSON form."""
    if not data:
        return None
    known = set(LimitSpan.__dataclass_fields__)
    spans = [LimitSpan(**{k: v for k, v in s.items() if k in known}) for s in data["spans"]]
    return HostLimitRecord(
        size_bytes=data["size_bytes"],
        mechanism=data.get("mechanism", ""),
        baseline_bytes=data.get("baseline_bytes"),
        spans=spans,
        errors=list(data.get("errors") or []),
    )
