"""One rank's two offload parts replayed through one host allocator, in the run's order.

A rank runs, every cycle: ``offload`` (parameters), ``offload optimizer``, ``load``,
``load optimizer`` (verl's order; ``offloadprobe run``'s phases). Both parts allocate
from the same process, so on CUDA they share PyTorch's pinned caching allocator:

- a pinned block one part frees stays resident in the cache for the process's life, so
  the optimizer state's ``.to("cpu")`` copies, freed by ``load optimizer``, are still
  resident when the next parameter offload makes its transient (naive: a pageable
  temporary and a new pinned copy beside the old one): the parts' peaks add;
- a request is served from any cached block of its power-of-two size class, whichever
  part freed it, so a parameter copy can take a cached optimizer block (and the
  optimizer the parameter copy's old block): the parts' figures are not independent.

Replaying each part alone and combining the two figures afterwards (the larger of the
parameter peak and the parameter steady bytes plus the optimizer state) misses both.
So the plan replays both parts' events, phase by phase, through one allocator
(:func:`offloadprobe.layout.pinned.replay`), and reads each part's figures with the
run's own ledger (``measure.summary._ledger``: every change of host bytes during a
part's phase is that part's). In CPU emulation nothing is pinned and a freed copy
leaves the process, which the same replay gives with ``pageable`` allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from offloadprobe.layout.pinned import (
    DEFAULT_CONFIG,
    Alloc,
    Event,
    Free,
    HostAllocatorConfig,
    HostKind,
    free_list_index,
    pinned_block_size,
    replay,
)

PARAMS, OPTIMIZER = "params", "optimizer"
PHASE_PART = {
    "offload": PARAMS,
    "offload optimizer": OPTIMIZER,
    "load": PARAMS,
    "load optimizer": OPTIMIZER,
}
"""The phases of one cycle, in the run's order, and the part each belongs to."""
OFFLOAD_PHASES = ("offload", "offload optimizer")


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerMoves:
    """How an optimizer-state strategy's host copies come and go."""

    tensors: tuple[int, ...]
    """Bytes of each host copy (one per state tensor moved)."""
    kind: HostKind
    kept: bool
    """True: allocated on the first offload and reused (``complete``); False: a fresh copy
    every offload, dropped by the load (``.to("cpu")`` / ``.to(device)``: legacy, fixed)."""

    def offload(self, cycle: int) -> list[Event]:
        if self.kept and cycle:
            return []
        return [
            Alloc(name=f"optimizer tensor {i}, cycle {cycle}", nbytes=n, kind=self.kind)
            for i, n in enumerate(self.tensors)
            if n > 0
        ]

    def load(self, cycle: int) -> list[Event]:
        if self.kept:
            return []
        return [
            Free(name=f"optimizer tensor {i}, cycle {cycle}")
            for i, n in enumerate(self.tensors)
            if n > 0
        ]


NO_OPTIMIZER_MOVES = OptimizerMoves(tensors=(), kind="pageable", kept=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseHost:
    """Host bytes of one phase of the replay: before it, at its peak, after it."""

    cycle: int
    phase: str
    before: int
    peak: int
    after: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PartFigures:
    """One part's host figures as the run's ledger reads them."""

    peak: int
    steady: int
    """What the part held right after its last offload."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankRun:
    """Both parts replayed together on one rank."""

    phases: tuple[PhaseHost, ...]
    params: PartFigures
    optimizer: PartFigures
    host_peak: int
    """Highest host bytes of any phase (``summary.host_peak_bytes`` over its baseline)."""
    host_allocs: int
    """Pinned slow-path allocations over the whole replay."""
    cross_reuses: int
    """Allocations of one part served by a cached pinned block the other part freed."""


def per_cycle(
    events_for_cycles: Callable[[int], Sequence[Event]], cycles: int
) -> list[list[Event]]:
    """Split a strategy's events (``events_for_cycles(n)``: the events of ``n`` cycles)
    into cycles: cycle ``c``'s events are what ``c + 1`` cycles add to ``c`` cycles."""
    out, done = [], []
    for c in range(cycles):
        upto = list(events_for_cycles(c + 1))
        if upto[: len(done)] != done:
            raise ValueError("a strategy's host events must extend with the number of cycles")
        out.append(upto[len(done) :])
        done = upto
    return out


def replay_phases(
    phases: Sequence[tuple[int, str, Sequence[Event]]],
    config: HostAllocatorConfig = DEFAULT_CONFIG,
) -> tuple[tuple[PhaseHost, ...], int, int]:
    """Replay every phase's events in order through one allocator: per phase, host bytes
    before, at the peak and after; the slow-path allocations; the cross-part reuses."""
    flat = [e for _, _, events in phases for e in events]
    replayed = replay(flat, config)
    cache = _CacheOwners()
    out, i, resident = [], 0, 0
    for cycle, phase, events in phases:
        part = PHASE_PART[phase]
        before = peak = resident
        for event, step in zip(events, replayed.steps[i : i + len(events)], strict=True):
            resident = step.resident
            peak = max(peak, resident)
            cache.note(event, step.reused, part, config)
        i += len(events)
        out.append(PhaseHost(cycle=cycle, phase=phase, before=before, peak=peak, after=resident))
    return tuple(out), replayed.host_allocs, cache.cross


@dataclass(kw_only=True, slots=True)
class _CacheOwners:
    """Which part freed each cached pinned block, per free list, most recent last (the
    order the cache hands them out in); counts blocks one part took from the other."""

    live: dict[str, tuple[str, int]] = field(default_factory=dict)
    freed: dict[int, list[str]] = field(default_factory=dict)
    cross: int = 0

    def note(self, event: Event, reused: bool, part: str, config: HostAllocatorConfig) -> None:
        if isinstance(event, Alloc) and event.kind == "pinned":
            index = free_list_index(pinned_block_size(event.nbytes, config))
            self.live[event.name] = (part, index)
            if reused and self.freed.get(index):
                self.cross += self.freed[index].pop() != part
        elif isinstance(event, Free) and event.name in self.live:
            freer, index = self.live.pop(event.name)
            self.freed.setdefault(index, []).append(freer)


def ledger(phases: Sequence[PhaseHost]) -> dict[str, PartFigures]:
    """Each part's (peak, steady) as ``measure.summary._ledger`` reads a run: a part's
    footprint at a moment is what it held at its phase's start plus the phase's rise."""
    held = {PARAMS: 0, OPTIMIZER: 0}
    peak = {PARAMS: 0, OPTIMIZER: 0}
    steady = {PARAMS: 0, OPTIMIZER: 0}
    for p in phases:
        part = PHASE_PART[p.phase]
        peak[part] = max(peak[part], held[part] + p.peak - p.before)
        held[part] += p.after - p.before
        if p.phase in OFFLOAD_PHASES:
            steady[part] = held[part]
    return {k: PartFigures(peak=peak[k], steady=steady[k]) for k in held}


def run_rank(
    param_cycles: Sequence[Sequence[Event]],
    optimizer: OptimizerMoves = NO_OPTIMIZER_MOVES,
    config: HostAllocatorConfig = DEFAULT_CONFIG,
) -> RankRun:
    """Replay ``len(param_cycles)`` cycles of both parts (parameter loads allocate no host
    memory: a strategy's events all belong to its offloads)."""
    phases: list[tuple[int, str, Sequence[Event]]] = []
    for c, events in enumerate(param_cycles):
        phases += [
            (c, "offload", events),
            (c, "offload optimizer", optimizer.offload(c)),
            (c, "load", []),
            (c, "load optimizer", optimizer.load(c)),
        ]
    hosts, allocs, cross = replay_phases(phases, config)
    parts = ledger(hosts)
    return RankRun(
        phases=hosts,
        params=parts[PARAMS],
        optimizer=parts[OPTIMIZER],
        host_peak=max((p.peak for p in hosts), default=0),
        host_allocs=allocs,
        cross_reuses=cross,
    )
