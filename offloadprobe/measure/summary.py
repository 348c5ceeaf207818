"""Derive a run's figures of merit from its phase records (pure functions)."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

from offloadprobe.core.records import PartSummary, PhaseRecord, RunSummary

PARAM_PHASES = ("offload", "load")
"""The parameter move: ``offload`` then ``load`` (names kept from schema 1)."""
OPTIMIZER_PHASES = ("offload optimizer", "load optimizer")
"""The optimizer-state move, measured as its own phases within a cycle."""
OFFLOADS = ("offload", "offload optimizer")
LOADS = ("load", "load optimizer")


def _ratio(value: int, payload: int) -> float:
    return value / payload if payload else 0.0


def _steady_rate(rates: list[float | None]) -> tuple[float | None, float | None]:
    """(first-cycle rate, steady rate = median of the later cycles, or the first)."""
    if not rates:
        return None, None
    later = [r for r in rates[1:] if r is not None]
    return rates[0], (median(later) if later else rates[0])


def _cycle_rates(phases: list[PhaseRecord], names: tuple[str, ...]) -> list[float | None]:
    """Per cycle: bytes moved by the named phases over their summed seconds (GB/s)."""
    by_cycle: dict[int, tuple[int, float]] = {}
    for p in phases:
        if p.phase in names:
            moved, seconds = by_cycle.get(p.cycle, (0, 0.0))
            by_cycle[p.cycle] = (moved + p.bytes_moved, seconds + p.seconds)
    return [
        (moved / seconds / 1e9 if seconds > 0 and moved else None)
        for _, (moved, seconds) in sorted(by_cycle.items())
    ]


def _ledger(phases: list[PhaseRecord]) -> dict[str, tuple[int, int]]:
    """Each part's (host peak, steady host) by a ledger over the phases in order.

    Every change of host RSS during one part's phase is that part's: its footprint at
    a moment is what it held at the phase start plus the phase's rise to its peak.
    Train phases belong to neither (the framework's, not a strategy's). Steady is what
    the part held right after its last offload.
    """
    held = {"params": 0, "optimizer": 0}
    peak = {"params": 0, "optimizer": 0}
    steady = {"params": 0, "optimizer": 0}
    for p in phases:
        part = "params" if p.phase in PARAM_PHASES else "optimizer"
        if p.phase not in PARAM_PHASES + OPTIMIZER_PHASES:
            continue
        host = p.host
        peak[part] = max(peak[part], held[part] + host.host_peak - host.host_rss_before)
        held[part] += host.host_rss_after - host.host_rss_before
        if p.phase in OFFLOADS:
            steady[part] = held[part]
    return {k: (peak[k], steady[k]) for k in held}


def _part(
    phases: list[PhaseRecord], names: tuple[str, ...], figures: tuple[int, int], moved: int
) -> PartSummary:
    peak, steady = figures
    _, offload = _steady_rate(_cycle_rates(phases, names[:1]))
    _, load = _steady_rate(_cycle_rates(phases, names[1:]))
    return PartSummary(
        moved_bytes=moved,
        host_peak_bytes=peak,
        host_peak_x=_ratio(peak, moved),
        steady_host_bytes=steady,
        steady_host_x=_ratio(steady, moved),
        offload_gbps=offload,
        load_gbps=load,
    )


def summarise(
    phases: list[PhaseRecord],
    *,
    payload_bytes: int,
    baseline_host_bytes: int,
    gpu_baseline_bytes: int | None,
    registered_bytes: int,
    integrity_ok: bool,
    optimizer_state_bytes: int | None = None,
    param_bytes_to_move: int | None = None,
    optimizer_bytes_to_move: int = 0,
) -> RunSummary:
    """Summarise offload/load cycles.

    - host peak: the highest host high-water mark of any offload or load phase,
      over the host RSS just before the first offload (train phases are excluded:
      their host use is the framework's, not the strategy's). In CPU emulation the
      emulated device bytes are taken out of every host figure first;
    - steady host: host RSS after the last offload, over that same baseline;
    - both as multiples of the bytes the offload moves: the parameter payload (when
      the strategy moves parameters) plus the optimizer-state bytes that left the
      device (the residency audit; what a strategy leaves behind shows as GPU left,
      and leaving everything behind is a "not offloaded" verdict). ``params`` and
      ``optimizer`` give each part over its own bytes;
    - pinned: page-locked host bytes after the last offload: the larger of CUPTI's
      records of every allocator (where CUPTI records) and the bytes PyTorch's
      allocator owns plus those the strategy declares it page-locked itself;
    - held while training: the most host RSS after a cycle's last load, over the same
      baseline: what the strategy keeps resident through the train phases;
    - GPU left: bytes still allocated after the last offload, over the allocation
      before the model existed.
    """
    params_moved = payload_bytes if param_bytes_to_move is None else param_bytes_to_move
    moved = params_moved + optimizer_bytes_to_move
    moving = [p for p in phases if p.phase in PARAM_PHASES + OPTIMIZER_PHASES]
    last_cycle = max(p.cycle for p in phases if p.phase in OFFLOADS)
    last_offloads = [p for p in phases if p.phase in OFFLOADS and p.cycle == last_cycle]
    last = last_offloads[-1]
    audited = next((p for p in last_offloads if p.left_on_device is not None), last)
    peak = max(p.host.host_peak for p in moving) - baseline_host_bytes
    steady = last.host.host_rss_after - baseline_host_bytes
    pinned, source, recorded = None, None, None
    if last.pinned is not None:  # each source is a floor: the larger governs
        pinned, source = last.pinned.reserved_after + registered_bytes, "allocator"
        recorded = last.pinned.locked_after
        if recorded is not None:
            pinned, source = max(pinned, recorded), "cupti"
    gpu_left = None
    if last.gpu is not None and gpu_baseline_bytes is not None:
        gpu_left = last.gpu.allocated_after - gpu_baseline_bytes
    resumed = {p.cycle: p for p in phases if p.phase in LOADS}  # each cycle's last load
    by_cycle = [resumed[c].host.host_rss_after - baseline_host_bytes for c in sorted(resumed)]
    held = max((p.host.host_rss_after for p in resumed.values()), default=None)
    held = None if held is None else held - baseline_host_bytes
    first_offload, offload = _steady_rate(_cycle_rates(phases, OFFLOADS))
    first_load, load = _steady_rate(_cycle_rates(phases, LOADS))
    ledger = _ledger(phases)
    has_optimizer = any(p.phase in OPTIMIZER_PHASES for p in phases)
    return RunSummary(
        host_peak_bytes=peak,
        host_peak_x=_ratio(peak, moved),
        steady_host_bytes=steady,
        steady_host_x=_ratio(steady, moved),
        pinned_reserved_bytes=pinned,
        held_while_training_bytes=held,
        held_while_training_x=None if held is None else _ratio(held, moved),
        held_by_cycle_bytes=by_cycle,
        pinned_source=source,
        pinned_declared_bytes=registered_bytes if last.pinned is not None else None,
        pinned_recorded_bytes=recorded,
        gpu_left_after_offload_bytes=gpu_left,
        offload_gbps=offload,
        load_gbps=load,
        first_offload_gbps=first_offload,
        first_load_gbps=first_load,
        integrity_ok=integrity_ok,
        left_after_offload_bytes_by_key=audited.left_on_device,
        optimizer_state_bytes=optimizer_state_bytes,
        steady_host_x_optimizer_state=(
            steady / optimizer_state_bytes if optimizer_state_bytes else None
        ),
        params=(
            _part(phases, PARAM_PHASES, ledger["params"], params_moved) if params_moved else None
        ),
        optimizer=(
            _part(phases, OPTIMIZER_PHASES, ledger["optimizer"], optimizer_bytes_to_move)
            if has_optimizer and optimizer_bytes_to_move
            else None
        ),
        moved_bytes=moved,
    )


def repeaked(summary: RunSummary, phases: list[PhaseRecord], baseline: int) -> RunSummary:
    """``summary`` with its peak figures derived again from ``phases`` (after the parent's
    group peaks went into them: ``measure.governing.parent_peak``); every other figure
    is kept. A peak only ever grows here."""
    moving = [p for p in phases if p.phase in PARAM_PHASES + OPTIMIZER_PHASES]
    if not moving:
        return summary
    peak = max(summary.host_peak_bytes, max(p.host.host_peak for p in moving) - baseline)
    moved = summary.moved_bytes or 0
    ledger = _ledger(phases)

    def part(old: PartSummary | None, key: str) -> PartSummary | None:
        if old is None:
            return None
        grown = max(old.host_peak_bytes, ledger[key][0])
        return replace(old, host_peak_bytes=grown, host_peak_x=_ratio(grown, old.moved_bytes))

    return replace(
        summary,
        host_peak_bytes=peak,
        host_peak_x=_ratio(peak, moved) if moved else summary.host_peak_x,
        params=part(summary.params, "params"),
        optimizer=part(summary.optimizer, "optimizer"),
    )
