"""Records of a run over several ranks: where each rank ran, its spreads and the node rows
(the world they make up, ``WorldRun``, is a record of ``core.records``: it holds runs).

Every size is an ``int`` of bytes; ``None`` means "not measurable here".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RankPlace:
    """Where one rank of a run over several ranks ran (torchrun's numbering)."""

    rank: int
    local_rank: int
    node_rank: int
    """torchrun's ``GROUP_RANK``: which node (agent) the rank belongs to."""
    world_size: int
    hostname: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Spread:
    """One figure over the ranks of a node: per-rank minimum, mean, maximum, and the sum."""

    min: float
    mean: float
    max: float
    sum: float
    ranks: int


@dataclass(frozen=True, kw_only=True, slots=True)
class NodePhase:
    """One phase on one node: the node cgroup's readings beside its ranks' own figures.

    Host figures leave out the emulated device (CPU emulation): ``emulated_device_bytes``
    is what the node's ranks held as emulated device at the phase end, already subtracted.
    """

    cycle: int
    phase: str
    usage_before: int | None
    """Node cgroup usage at the phase start, less the emulated device."""
    peak: int | None
    """Node cgroup high-water mark during the phase, less the emulated device."""
    usage_after: int | None
    peak_is_phase_local: bool
    """True when the cgroup's peak counter was reset at the phase start."""
    emulated_device_bytes: int
    rank_peak_sum: int
    """Sum over the node's ranks of each rank's host high-water mark in the phase."""
    rank_peak_max: int
    rank_rss_before_sum: int
    """Sum over the node's ranks of host RSS at the phase start."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeRecord:
    """One node of a run over several ranks: its ranks' spread and its own measured peak."""

    node_rank: int
    hostname: str
    ranks: list[int]
    cgroup: str | None
    """Where the node figures come from (the node's memory cgroup), in words."""
    cgroup_missing: str | None
    """Why there is no node figure, when there is none."""
    baseline_bytes: int | None
    """Node cgroup usage just before the first offload, less the emulated device."""
    peak_bytes: int | None
    """Highest node cgroup usage in any offload or load phase, over ``baseline_bytes``."""
    peak_x: float | None
    """``peak_bytes`` over the bytes the node's ranks move together."""
    steady_bytes: int | None
    """Node cgroup usage after the last offload, over ``baseline_bytes``."""
    rank_peak_sum_bytes: int | None
    """Sum of the ranks' own host peaks (each over its own baseline): the node figure if
    every rank peaked at once."""
    figures: dict[str, Spread]
    """Each summary figure (``host_peak_bytes``, ``steady_host_bytes``...) over the ranks."""
    phases: list[NodePhase]
