"""``plan --probe --strategy SPEC``: a strategy's host figures replayed from one real run.

A built-in strategy declares its host allocations (``host_events``), so ``plan`` projects
it at any size. A user's strategy declares none: ``plan`` runs it once on the probe
model, in a worker as ``offloadprobe run`` does, and replays what that run measured.
Its host events are the run record's own, per offload/load phase: where host memory
stood at the phase start, its peak over that start, where it stood after, and the
page-locked bytes after. Replayed, they give the row's figures by the same definitions
as ``run``'s summary (``measure.summary``), so the row says exactly what the run said.

Those figures hold for the probe's size only: nothing is scaled to another size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.records import PhaseRecord, RunRecord, RunSummary
from offloadprobe.measure.summary import OFFLOADS, OPTIMIZER_PHASES, PARAM_PHASES

MEASURED = "measured on the probe (one run)"
"""What a measured row's figures are, in the table and the JSON (``figures``)."""
PROJECTED = "projected"
"""What a built-in row's figures are: arithmetic over its declared host events."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredPhase:
    """One offload or load phase of the run, as a host event (bytes over the host RSS
    before the first offload, the run's baseline)."""

    cycle: int
    phase: str
    host_start: int
    """Host bytes at the phase start, over the baseline."""
    peak_over_start: int
    """The phase's host high-water mark over its own start."""
    host_after: int
    """Host bytes at the phase end, over the baseline."""
    pinned_reserved: int | None
    """PyTorch's pinned blocks after the phase (in use and cached); None: not recorded
    (CPU emulation has no pinned memory)."""
    pinned_locked: int | None
    """Page-locked bytes of any allocator after the phase (CUPTI); None: not recording."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredRow:
    """A strategy's row of ``plan --probe`` from one run of it on the probe model."""

    strategy: str
    """The row's name: ``name`` of ``name=spec``, or the spec."""
    spec: str
    device: str
    """Where the run ran: ``cpu`` (CPU emulation) or ``cuda``."""
    verdict: Verdict
    figures: str = MEASURED
    payload_bytes: int | None
    """None where the worker left no record (killed): no figure is made up for it."""
    baseline_host_bytes: int | None
    registered_bytes: int | None
    """Bytes the strategy declares it page-locked itself (``cudaHostRegister``)."""
    phases: tuple[MeasuredPhase, ...]
    peak: int | None
    """Host peak over the baseline; None where the run gave no summary (it failed)."""
    steady: int | None
    """Host bytes after the last offload, over the baseline."""
    pinned: int | None
    """Page-locked bytes after the last offload; None where none were recorded."""
    summary: RunSummary | None
    """The run's own summary, as ``offloadprobe run`` reports it."""

    @property
    def emulated(self) -> bool:
        return self.device == "cpu"


def host_events(run: RunRecord) -> tuple[MeasuredPhase, ...]:
    """The run's offload and load phases as host events, in order."""
    base = run.baseline_host_bytes
    return tuple(_event(p, base) for p in run.phases if p.phase in PARAM_PHASES + OPTIMIZER_PHASES)


def _event(p: PhaseRecord, base: int) -> MeasuredPhase:
    host = p.host
    return MeasuredPhase(
        cycle=p.cycle,
        phase=p.phase,
        host_start=host.host_rss_before - base,
        peak_over_start=host.host_peak - host.host_rss_before,
        host_after=host.host_rss_after - base,
        pinned_reserved=p.pinned.reserved_after if p.pinned is not None else None,
        pinned_locked=p.pinned.locked_after if p.pinned is not None else None,
    )


def replay(events: Sequence[MeasuredPhase], registered: int | None) -> tuple[int, int, int | None]:
    """(host peak, steady host, pinned) of the events: the highest peak of any phase, the
    host after the last offload, and the page-locked bytes after it (the allocator's
    plus those the strategy registered itself, or CUPTI's record where larger)."""
    peak = max(e.host_start + e.peak_over_start for e in events)
    offloads = [e for e in events if e.phase in OFFLOADS]
    last_cycle = max(e.cycle for e in offloads)
    last = [e for e in offloads if e.cycle == last_cycle][-1]
    pinned = None
    if last.pinned_reserved is not None:
        pinned = last.pinned_reserved + (registered or 0)
        if last.pinned_locked is not None:
            pinned = max(pinned, last.pinned_locked)
    return peak, last.host_after, pinned


def measured_row(
    *, name: str | None, spec: str, device: str, run: RunRecord | None, verdict: Verdict
) -> MeasuredRow:
    """The row of one run of ``spec``: its verdict, and its figures where it gave them."""
    events = host_events(run) if run is not None else ()
    summary = run.summary if run is not None else None
    registered = summary.pinned_declared_bytes if summary is not None else None
    figures: tuple[int | None, int | None, int | None] = (None, None, None)
    if summary is not None and any(e.phase in OFFLOADS for e in events):
        figures = replay(events, registered)
    peak, steady, pinned = figures
    return MeasuredRow(
        strategy=name or spec,
        spec=spec,
        device=device,
        verdict=verdict,
        payload_bytes=run.payload_bytes if run is not None else None,
        baseline_host_bytes=run.baseline_host_bytes if run is not None else None,
        registered_bytes=registered,
        phases=events,
        peak=peak,
        steady=steady,
        pinned=pinned,
        summary=summary,
    )
