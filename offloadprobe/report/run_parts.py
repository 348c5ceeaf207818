"""What a run moved, part by part (parameters, optimizer state), read from its record.

The summary block of ``run`` has one row per part. This module is the only place that
decides which figure of a ``RunSummary`` belongs to which part, so a new figure (or a new
part) is one change here and one line in the column list.

Whether a part stayed on the device by design is read from the record, never from a
strategy's name: a part of which nothing moved (everything it holds is still on the
device after the offload) was kept; a part that moved yet left bytes behind left them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from offloadprobe.core.owner_roles import MODEL_ROLES, merged, part_word, role_of, word
from offloadprobe.core.records import PartSummary, RunRecord
from offloadprobe.core.roles import Role
from offloadprobe.core.verdicts import residency_problems

PART_NAMES = {Role.FROZEN: "frozen params", Role.REFERENCE: "ref model"}
"""The model's parts beside its parameters, by role, as rows under ``parameters``."""

PARAMETERS = "parameters"
OPTIMIZER = "optimizer"


@dataclass(frozen=True, kw_only=True, slots=True)
class Part:
    """One part of what an offload moves, with the figures measured for it alone."""

    name: str
    moves: int | None
    """Bytes the part moves (its payload); 0 when nothing of it moved."""
    host_peak: int | None = None
    host_peak_x: float | None = None
    steady: int | None = None
    steady_x: float | None = None
    left: int | None = None
    """Bytes of this part still on the device after the last offload."""
    kept: bool = False
    """Nothing of this part moved: its strategy keeps it on the device by design."""
    offload_gbps: float | None = None
    """Steady rate of this part's offload (median of the cycles after the first)."""
    load_gbps: float | None = None
    note: str = ""
    """A sentence printed under the summary (why a part stays, how figures were taken)."""
    within: str = ""
    """A sub-part (frozen parameters, the reference model): its host figures are in this
    part's, which moves it in the same phases."""


def run_roles(run: RunRecord) -> dict[str, str]:
    """Each owner's role, as the run's residency facts say (``core.owner_roles``)."""
    return merged(fact.roles for fact in run.residency)


def is_model_owner(owner: str, roles: Mapping[str, str] | None = None) -> bool:
    """Whether a residency owner is the model's (parameters, gradients, frozen parameters,
    the reference model) rather than optimizer state, by its role in ``roles``."""
    return role_of(roles or {}, owner) in MODEL_ROLES


def _left(run: RunRecord, *, model: bool) -> int | None:
    by_key = run.summary.left_after_offload_bytes_by_key if run.summary else None
    if by_key is None:
        return None
    roles = run_roles(run)
    return sum(v for k, v in by_key.items() if is_model_owner(k, roles) == model)


def left_owners(run: RunRecord, *, model: bool) -> list[str]:
    """Owners of one part left on the device after the last offload, largest first."""
    by_key = (run.summary.left_after_offload_bytes_by_key if run.summary else None) or {}
    roles = run_roles(run)
    owners = [(v, k) for k, v in by_key.items() if v and is_model_owner(k, roles) == model]
    return [k for _, k in sorted(owners, reverse=True)]


def _failed_to_move(run: RunRecord, name: str) -> bool:
    """The record says this part should have moved and did not (a verdict, not a design)."""
    words = word(run_roles(run), Role.PARAMETERS) if name == PARAMETERS else "optimizer state"
    return any(line.startswith(words) for line in residency_problems(run.residency))


def _kept_note(run: RunRecord, name: str) -> str:
    if name == PARAMETERS:
        return f"parameters not offloaded (--strategy {run.strategy})"
    return (
        f"optimizer state not offloaded (--optimizer-strategy {run.optimizer_strategy}): "
        "it stays on the device by design"
    )


def parts(run: RunRecord) -> list[Part]:
    """Parameters, then optimizer state, each with what was measured for it."""
    s = run.summary
    if s is None:
        return []
    measured = {PARAMETERS: s.params, OPTIMIZER: s.optimizer}
    if any(m is not None for m in measured.values()):
        found = _measured_parts(run, measured)
    else:
        found = _shared_phase_parts(run)
    return found[:1] + _sub_parts(run) + found[1:]


def _sub_parts(run: RunRecord) -> list[Part]:
    """One row per model part beside its parameters: its bytes, what it left."""
    by_key = (run.summary.left_after_offload_bytes_by_key if run.summary else None) or {}
    roles = run_roles(run)
    return [
        Part(
            name=part_word(roles, key, PART_NAMES),
            moves=nbytes,
            left=by_key.get(key, 0),
            within=PARAMETERS,
        )
        for key, nbytes in run.part_bytes.items()
        if nbytes
    ]


def kept_parts(run: RunRecord) -> set[str]:
    """Names of the parts that stayed on the device by design."""
    return {p.name for p in parts(run) if p.kept}


def _measured_parts(run: RunRecord, measured: dict[str, PartSummary | None]) -> list[Part]:
    """Each part moved in its own phase, over its own bytes; the whole when both moved."""
    s = run.summary
    out = []
    for name, m in measured.items():
        left = _left(run, model=name == PARAMETERS)
        kept = m is None and bool(left) and not _failed_to_move(run, name)
        part = Part(
            name=name,
            moves=0 if m is None else m.moved_bytes,
            left=left,
            kept=kept,
            note=_kept_note(run, name) if kept else "",
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
                moves=s.moved_bytes,
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
    holds = {PARAMETERS: run.payload_bytes, OPTIMIZER: s.optimizer_state_bytes}
    base = []
    for name, size in holds.items():
        left = _left(run, model=name == PARAMETERS)
        kept = bool(size) and left is not None and left >= size
        kept = kept and not _failed_to_move(run, name)
        base.append(
            Part(
                name=name,
                moves=0 if kept else size,
                left=left,
                kept=kept,
                note=_kept_note(run, name) if kept else "",
            )
        )
    params, optimizer = base
    if params.kept and optimizer.kept:
        return base
    if params.kept or optimizer.kept:
        # One part moves alone: the run's host figures are that part's.
        index = 1 if params.kept else 0
        moving = base[index]
        base[index] = replace(
            moving,
            host_peak=s.host_peak_bytes,
            host_peak_x=_over(s.host_peak_bytes, moving.moves),
            steady=s.steady_host_bytes,
            steady_x=_over(s.steady_host_bytes, moving.moves),
            offload_gbps=s.offload_gbps,
            load_gbps=s.load_gbps,
        )
        return base
    moves = run.payload_bytes + (s.optimizer_state_bytes or 0)
    both = Part(
        name="both",
        moves=moves,
        host_peak=s.host_peak_bytes,
        host_peak_x=_over(s.host_peak_bytes, moves),
        steady=s.steady_host_bytes,
        steady_x=_over(s.steady_host_bytes, moves),
        left=_total(s.left_after_offload_bytes_by_key),
        offload_gbps=s.offload_gbps,
        load_gbps=s.load_gbps,
        note="parameters and optimizer state move in one phase: their host figures are "
        "measured together (row 'both')",
    )
    return [params, optimizer, both]


def _over(value: int | None, payload: int | None) -> float | None:
    if value is None or not payload:
        return None
    return value / payload


def _total(by_key: dict[str, int] | None) -> int | None:
    return None if by_key is None else sum(by_key.values())
