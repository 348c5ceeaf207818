"""Node rows of a run over several ranks: the ranks' spread and the node cgroup's own peak.

Every rank measures itself (its ``RunRecord``); one rank per node (local rank 0) reads
the node's memory cgroup around every phase (:class:`NodeReading`). The phases of all
ranks are aligned with barriers, so the node's n-th phase is every rank's n-th phase.
Pure functions over records: no torch, no processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

from offloadprobe.core.records import NodePhase, NodeRecord, RunRecord, Spread
from offloadprobe.measure.summary import LOADS, OFFLOADS

FIGURES = (
    "host_peak_bytes",
    "steady_host_bytes",
    "pinned_reserved_bytes",
    "gpu_left_after_offload_bytes",
    "offload_gbps",
    "load_gbps",
    "moved_bytes",
)
"""Summary figures spread over a node's ranks (min, mean, max, sum)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeReading:
    """The node cgroup around one phase, raw (the emulated device still inside)."""

    cycle: int
    phase: str
    usage_before: int | None
    peak: int | None
    usage_after: int | None
    peak_is_phase_local: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSource:
    """What one node's local rank 0 sent: its readings and where they came from."""

    node_rank: int
    hostname: str
    cgroup: str | None
    cgroup_missing: str | None
    readings: list[NodeReading]
    ends_only: bool = False
    """No node cgroup: the readings are a process tree's at each phase's two ends (the
    larger end stands for the peak: a floor of it)."""


def spread(values: Iterable[float | int | None]) -> Spread | None:
    """Minimum, mean, maximum and sum of the values that exist (None when none do)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return Spread(
        min=min(present),
        mean=fmean(present),
        max=max(present),
        sum=sum(present),
        ranks=len(present),
    )


def _minus(value: int | None, constant: int) -> int | None:
    return None if value is None else value - constant


def node_phases(ranks: Sequence[RunRecord], readings: Sequence[NodeReading]) -> list[NodePhase]:
    """Pair each node reading with the same phase of every rank on the node."""
    by_phase = [{(p.cycle, p.phase): p for p in r.phases} for r in ranks]
    out = []
    for reading in readings:
        key = (reading.cycle, reading.phase)
        mine = [phases[key] for phases in by_phase if key in phases]
        if len(mine) != len(ranks):
            continue  # a rank stopped before this phase: nothing to put beside it
        device_before = sum(p.host.device_in_host_before for p in mine)
        device_after = sum(p.host.device_in_host_after for p in mine)
        out.append(
            NodePhase(
                cycle=reading.cycle,
                phase=reading.phase,
                usage_before=_minus(reading.usage_before, device_before),
                peak=_minus(reading.peak, max(device_before, device_after)),
                usage_after=_minus(reading.usage_after, device_after),
                peak_is_phase_local=reading.peak_is_phase_local,
                emulated_device_bytes=device_after,
                rank_peak_sum=sum(p.host.host_peak for p in mine),
                rank_peak_max=max(p.host.host_peak for p in mine),
                rank_rss_before_sum=sum(p.host.host_rss_before for p in mine),
            )
        )
    return out


def _node_peak(
    phases: list[NodePhase], *, ends_only: bool = False
) -> tuple[int | None, int | None, int | None, str | None]:
    """(baseline, peak over it, steady over it, why not) from the offload and load phases."""
    moving = [p for p in phases if p.phase in OFFLOADS + LOADS]
    if not moving:
        return None, None, None, "no offload or load phase completed on every rank"
    if any(p.peak is None or p.usage_before is None for p in moving):
        return None, None, None, "the node cgroup has no peak counter here"
    if not ends_only and not all(p.peak_is_phase_local for p in moving):
        return None, None, None, "the node cgroup's peak counter cannot be reset per phase here"
    baseline = moving[0].usage_before
    assert baseline is not None
    last = [p for p in moving if p.phase in OFFLOADS][-1]
    steady = None if last.usage_after is None else last.usage_after - baseline
    return baseline, max(p.peak or 0 for p in moving) - baseline, steady, None


def node_record(ranks: Sequence[RunRecord], source: NodeSource) -> NodeRecord:
    """One node's row from its ranks' records and its local rank 0's cgroup readings."""
    phases = node_phases(ranks, source.readings)
    found = _node_peak(phases, ends_only=source.ends_only) if source.cgroup else None
    baseline, peak, steady, why = found or (None, None, None, None)
    summaries = [r.summary for r in ranks]
    figures = {}
    for name in FIGURES:
        found = spread(getattr(s, name) if s is not None else None for s in summaries)
        if found is not None:
            figures[name] = found
    moved = figures.get("moved_bytes")
    peaks = figures.get("host_peak_bytes")
    complete = all(s is not None for s in summaries)
    return NodeRecord(
        node_rank=source.node_rank,
        hostname=source.hostname,
        ranks=[r.place.rank if r.place else i for i, r in enumerate(ranks)],
        cgroup=source.cgroup,
        cgroup_missing=source.cgroup_missing or why,
        baseline_bytes=baseline,
        peak_bytes=peak,
        peak_x=(peak / moved.sum) if peak is not None and moved and moved.sum else None,
        steady_bytes=steady,
        rank_peak_sum_bytes=int(peaks.sum) if peaks is not None and complete else None,
        figures=figures,
        phases=phases,
    )


def node_records(ranks: Sequence[RunRecord], sources: Sequence[NodeSource]) -> list[NodeRecord]:
    """One row per node, ranks grouped by torchrun's node rank."""
    out = []
    for source in sorted(sources, key=lambda s: s.node_rank):
        mine = [r for r in ranks if r.place is not None and r.place.node_rank == source.node_rank]
        out.append(node_record(sorted(mine, key=lambda r: r.place.rank), source))
    return out


def node_notes(nodes: Sequence[NodeRecord]) -> list[str]:
    """What the node figures cover and what holds them, for the row's notes."""
    notes = []
    if any(n.peak_bytes is not None for n in nodes):
        notes.append(
            "a --max-host-peak budget holds each node's measured peak too, times the bytes "
            "its ranks move"
        )
    for node in nodes:
        if node.peak_bytes is None:
            notes.append(f"node {node.node_rank}: no measured figure, no budget holds it whole")
        elif node.cgroup is not None and node.cgroup.startswith(TREE):
            notes.append(
                f"node {node.node_rank}: no memory cgroup ({node.cgroup_missing}): its "
                "figures are its ranks' process tree's RSS and /dev/shm at each phase's "
                "ends, a floor of its peak (a memfd is in neither)"
            )
    return notes


TREE = "process tree"
"""How a node's figures begin to say where they come from, without a node cgroup."""


def tree_description(root: int) -> str:
    """Where a node's figures come from without a node cgroup."""
    return f"{TREE} of pid {root} (the ranks' launcher) + /dev/shm, at each phase's ends"
