"""What a run moved, part by part (parameters, optimizer state), read from its record.

The summary block of ``run`` has one row per part. This module is the only place that
decides which figure of a ``RunSummary`` belongs to which part, so a new figure (or a new
part) is one change here and one line in the column list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from offloadprobe.core.records import RunRecord

MODEL_BUFFERS = ("param_data", "grad_data")
"""Residency owners that belong to the model's DDP buffers; every other owner is
optimizer state."""

NOT_OFFLOADED = "none"
"""The strategy name (model or optimizer) that deliberately moves nothing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Part:
    """One part of what an offload moves, with the figures measured for it alone."""

    name: str
    moves: int | None
    """Bytes the part must move (its payload)."""
    host_peak: int | None = None
    host_peak_x: float | None = None
    steady: int | None = None
    steady_x: float | None = None
    left: int | None = None
    """Bytes of this part still on the device after the last offload."""
    left_expected: bool = False
    offload_gbps: float | None = None
    """Steady rate of this part's offload (median of the cycles after the first)."""
    load_gbps: float | None = None
    note: str = ""
    """A sentence printed under the summary (why a part stays, how figures were taken)."""


def _left(run: RunRecord, *, model: bool) -> int | None:
    by_key = run.summary.left_after_offload_bytes_by_key if run.summary else None
    if by_key is None:
        return None
    return sum(v for k, v in by_key.items() if (k in MODEL_BUFFERS) == model)


def left_owners(run: RunRecord, *, model: bool) -> list[str]:
    """Owners of one part left on the device after the last offload, largest first."""
    by_key = (run.summary.left_after_offload_bytes_by_key if run.summary else None) or {}
    owners = [(v, k) for k, v in by_key.items() if v and (k in MODEL_BUFFERS) == model]
    return [k for _, k in sorted(owners, reverse=True)]


def parts(run: RunRecord) -> list[Part]:
    """Parameters, then optimizer state, each with what was measured for it."""
    s = run.summary
    if s is None:
        return []
    measured = {
        "parameters": getattr(s, "params", None),
        "optimizer": getattr(s, "optimizer", None),
    }
    if any(m is not None for m in measured.values()):
        return _measured_parts(run, measured)
    return _shared_phase_parts(run)


def _still(run: RunRecord, name: str) -> bool:
    """Whether the part's strategy is ``none``: it stays on the device by design."""
    who = run.strategy if name == "parameters" else run.optimizer_strategy
    return who == NOT_OFFLOADED


def _stays_note(run: RunRecord, name: str) -> str:
    if not _still(run, name):
        return ""
    if name == "parameters":
        return "parameters not offloaded (--strategy none)"
    return (
        "optimizer state not offloaded (--optimizer-strategy none): it stays on the device "
        "by design"
    )


def _measured_parts(run: RunRecord, measured: dict[str, Any]) -> list[Part]:
    """Each part measured in its own phase, over its own bytes; the whole when both moved."""
    s = run.summary
    out = []
    for name, m in measured.items():
        model = name == "parameters"
        part = Part(
            name=name,
            moves=0 if m is None else m.moved_bytes,
            left=_left(run, model=model),
            left_expected=_still(run, name),
            note=_stays_note(run, name),
        )
        if m is not None:
            part = replace(
                part,
                host_peak=m.host_peak_bytes,
                host_peak_x=m.host_peak_x,
                steady=m.steady_host_bytes,
                steady_x=m.steady_host_x,
                offload_gbps=m.offload_gbps,
                load_gbps=m.load_gbps,
            )
        out.append(part)
    if all(m is not None for m in measured.values()):
        out.append(
            Part(
                name="whole",
                moves=getattr(s, "moved_bytes", None),
                host_peak=s.host_peak_bytes,
                host_peak_x=s.host_peak_x,
                steady=s.steady_host_bytes,
                steady_x=s.steady_host_x,
                left=_total(s.left_after_offload_bytes_by_key),
            )
        )
    return out


def _shared_phase_parts(run: RunRecord) -> list[Part]:
    """Records from before per-part phases: one phase moved whatever moved."""
    s = run.summary
    params_still = _still(run, "parameters")
    optimizer_still = _still(run, "optimizer")
    params = Part(
        name="parameters",
        moves=0 if params_still else run.payload_bytes,
        left=_left(run, model=True),
        left_expected=params_still,
        note=_stays_note(run, "parameters"),
    )
    optimizer = Part(
        name="optimizer",
        moves=0 if optimizer_still else s.optimizer_state_bytes,
        left=_left(run, model=False),
        left_expected=optimizer_still,
        note=_stays_note(run, "optimizer"),
    )
    if optimizer_still or params_still:
        # One part moves alone: the run's host figures are that part's.
        moving = optimizer if params_still else params
        moving = replace(
            moving,
            host_peak=s.host_peak_bytes,
            host_peak_x=_over(s.host_peak_bytes, moving.moves),
            steady=s.steady_host_bytes,
            steady_x=_over(s.steady_host_bytes, moving.moves),
            offload_gbps=s.offload_gbps,
            load_gbps=s.load_gbps,
        )
        return [moving, optimizer] if moving.name == "parameters" else [params, moving]
    both = Part(
        name="both",
        moves=run.payload_bytes + (s.optimizer_state_bytes or 0),
        host_peak=s.host_peak_bytes,
        steady=s.steady_host_bytes,
        left=_total(s.left_after_offload_bytes_by_key),
        offload_gbps=s.offload_gbps,
        load_gbps=s.load_gbps,
        note="parameters and optimizer state move in one phase: their host figures are "
        "measured together (row 'both')",
    )
    both = replace(
        both,
        host_peak_x=_over(both.host_peak, both.moves),
        steady_x=_over(both.steady, both.moves),
    )
    return [params, optimizer, both]


def _over(value: int | None, payload: int | None) -> float | None:
    if value is None or not payload:
        return None
    return value / payload


def _total(by_key: dict[str, int] | None) -> int | None:
    return None if by_key is None else sum(by_key.values())
