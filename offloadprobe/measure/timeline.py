"""A run's memory over time: sampled series and the exact phase spans beside them.

Samples draw the shape only. A sampler can miss a peak that lasts less than its
interval, so no renderer may present a sampled maximum as a peak: the exact per-phase
peaks are the phase records' (VmHWM, allocator peaks). A span carries only its cycle,
phase and times; renderers join it with the run's ``PhaseRecord`` of the same cycle and
phase for the exact readings.

Times are integer nanoseconds of ``time.perf_counter_ns`` since the timeline's epoch.
A series stores a value only when it differs from the previous one (a step function:
each value holds until the next), which loses nothing and keeps quiet stretches small.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

TIMELINE_VERSION = 1
GAP_NS = 10_000_000
"""Ten intervals of the 1 kHz target with no sample: a gap, recorded and drawn as one."""
SAMPLED_NOTE = (
    "counters are sampled (about 1 kHz) and draw the shape only: a sample maximum is not "
    "a peak; exact per-phase peaks (VmHWM, allocator peaks) are the phase slices' args"
)


@dataclass(kw_only=True, slots=True)
class Series:
    """One sampled counter, in bytes, as a step function of time."""

    name: str
    """Stable key, e.g. ``host.rss``, ``gpu.allocated``."""
    label: str
    """In words, for legends and trace tracks."""
    every: int = 1
    """Read on every ``every``-th tick of the sampler (slow sources read less often)."""
    times_ns: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("q"))
    samples: int = 0
    """Reads taken (stored values are fewer: repeats are dropped)."""

    def append(self, t_ns: int, value: int) -> None:
        self.samples += 1
        if self.values and self.values[-1] == value:
            return
        self.times_ns.append(t_ns)
        self.values.append(value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "every": self.every,
            "samples": self.samples,
            "times_ns": self.times_ns.tolist(),
            "values": self.values.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Series:
        return cls(
            name=data["name"],
            label=data["label"],
            every=int(data.get("every", 1)),
            samples=int(data.get("samples", 0)),
            times_ns=array("q", data["times_ns"]),
            values=array("q", data["values"]),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseSpan:
    """Where one measured phase lies on the timeline (the timed region of PhaseMeter)."""

    cycle: int
    phase: str
    start_ns: int
    end_ns: int


BUSY, LEFT_OUT = "busy", "left out"
"""Why a gap has no sample: the sampler got no CPU, or what it read was left out."""
GAP_CAUSES = {
    BUSY: "every CPU busy",
    LEFT_OUT: "read while CPU emulation moved its device pages",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Gap:
    """A stretch with no sample kept. Either the sampler got no CPU (it runs at the
    lowest priority and waits while every CPU is busy), or what it read there was left out
    (taken while CPU emulation moved its device pages: RSS between two states). Series
    hold their last value across it only because nothing was kept: renderers must show
    the gap, not a flat line."""

    sampler: str
    """``process`` (host and cgroup, the sidecar) or ``thread`` (the CUDA counters)."""
    start_ns: int
    """Time of the last sample before it."""
    end_ns: int
    """Time of the first sample after it."""
    cause: str = BUSY
    """``busy`` (no read longer than ``GAP_NS`` in it) or ``left out`` (read throughout)."""


@dataclass(kw_only=True, slots=True)
class Timeline:
    """Everything one process sampled, with its phase spans."""

    interval_ns: int
    """The sampler's nominal tick at the end of the run (it may have slowed down)."""
    series: list[Series] = field(default_factory=list)
    spans: list[PhaseSpan] = field(default_factory=list)
    end_ns: int = 0
    """Time of the last tick: every series' last value holds until here."""
    ticks: int = 0
    notes: list[str] = field(default_factory=list)
    rank: int = 0
    gaps: list[Gap] = field(default_factory=list)
    """Every stretch longer than ``GAP_NS`` between two samples of one sampler."""

    def get(self, name: str) -> Series | None:
        return next((s for s in self.series if s.name == name), None)

    def span(self, cycle: int, phase: str) -> PhaseSpan | None:
        return next((s for s in self.spans if s.cycle == cycle and s.phase == phase), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "timeline_version": TIMELINE_VERSION,
            "interval_ns": self.interval_ns,
            "end_ns": self.end_ns,
            "ticks": self.ticks,
            "rank": self.rank,
            "notes": list(self.notes),
            "spans": [
                {"cycle": s.cycle, "phase": s.phase, "start_ns": s.start_ns, "end_ns": s.end_ns}
                for s in self.spans
            ],
            "series": [s.to_dict() for s in self.series],
            "gaps": [
                {"sampler": g.sampler, "start_ns": g.start_ns, "end_ns": g.end_ns, "cause": g.cause}
                for g in self.gaps
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timeline:
        return cls(
            interval_ns=int(data["interval_ns"]),
            end_ns=int(data.get("end_ns", 0)),
            ticks=int(data.get("ticks", 0)),
            rank=int(data.get("rank", 0)),
            notes=list(data.get("notes", [])),
            spans=[PhaseSpan(**s) for s in data.get("spans", [])],
            series=[Series.from_dict(s) for s in data.get("series", [])],
            gaps=[Gap(**g) for g in data.get("gaps", [])],
        )
