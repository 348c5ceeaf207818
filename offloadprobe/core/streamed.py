"""What a worker's parent holds beside its record: facts the worker streamed as it found
them, and readings the parent took itself, where the measured code cannot reach.

A worker's record and its exit status are written by the measured process, which can
rewrite them up to its last instruction (an ``atexit`` hook, ``os._exit(0)``). So the
worker also tells its parent, over a socket the parent listens on (``isolation.warden``)
and acknowledges line by line: a mark at each phase's start and end (the parent resets
and reads the group's peak there), each integrity problem as it is found, and its result
as it writes it. The parent watches the worker's cgroup membership meanwhile. What the
parent was told cannot be taken back; the rules here combine it with the record, and
the worst wins:

- an integrity problem streamed and missing from the record: ``corrupted`` still (the
  record was rewritten), over an ``inconsistent`` or ``exited early`` ending too;
- a record file that is not the result the worker sent, a record the worker never sent,
  or phases it never marked: ``inconsistent``;
- the group's peak of each phase: the larger of the parent's reading and the record's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import RunRecord

OVERRIDDEN = ("inconsistent", "exited early")
"""Endings a streamed integrity problem outranks: they say the record cannot be trusted,
the problem says what the strategy did."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PhasePeak:
    """One phase's memory-cgroup peak, read by the parent between the worker's marks."""

    cycle: int
    phase: str
    peak_bytes: int | None
    """The group's high-water mark over the phase (None: not phase-local here)."""
    floor_bytes: int | None = None
    """cgroup v1: the highest usage threshold the kernel signalled to the parent."""
    file_after_bytes: int | None = None
    """Page cache charged to the group at the phase end, read by the parent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Streamed:
    """Everything the parent was told by (and read beside) one worker."""

    connected: bool = False
    """The worker reported to its parent at all (a stand-in worker of a test may not)."""
    expected: bool = False
    """The worker is a real one, which reports before any strategy code runs: one that
    never did and left a record has a record that was written otherwise."""
    marks: list[PhasePeak] = field(default_factory=list)
    """Every phase the worker marked as ended, in order, with the parent's reading."""
    problems: list[str] = field(default_factory=list)
    """Integrity problems, as the worker found them."""
    result: dict[str, Any] | None = None
    """The worker's result as it sent it when it wrote its record file."""
    rewritten: bool = False
    """The record file the parent read is not the result the worker sent (or is gone)."""
    unsent: bool = False
    """A record file exists, but the worker never sent its result to its parent."""
    peaks_by_parent: bool = False
    """The parent reset and read the group's peak at every mark (the worker did not)."""
    garbled: int = 0
    """Lines from the worker the parent could not read (an honest worker sends none)."""


def merge(run: RunRecord, facts: Streamed) -> RunRecord:
    """``run`` with every streamed problem in its integrity (first the record's own)."""
    missing = [p for p in facts.problems if p not in run.integrity]
    if not missing:
        return run
    note = (
        f"{len(missing)} integrity problem(s) the worker reported to its parent as it found "
        "them are missing from its record: the record was changed after the check"
    )
    summary = replace(run.summary, integrity_ok=False) if run.summary is not None else None
    return replace(
        run, integrity=[*run.integrity, *missing], summary=summary, notes=[*run.notes, note]
    )


def contradictions(run: RunRecord | None, facts: Streamed) -> list[str]:
    """Where the record contradicts what the worker told its parent, one line each."""
    if not (facts.connected or facts.expected):
        return []
    lines = []
    if facts.unsent:
        lines.append("the worker never sent its record to its parent: it was written otherwise")
    if facts.garbled:
        lines.append(f"the worker sent its parent {facts.garbled} line(s) it could not read")
    if facts.rewritten:
        lines.append("the record file is not the record the worker sent: it was rewritten")
    if run is not None and run.place is None and run.world is None and facts.result is not None:
        marked = {(m.cycle, m.phase) for m in facts.marks}
        unmarked = [p for p in run.phases if (p.cycle, p.phase) not in marked]
        if unmarked:
            first = unmarked[0]
            lines.append(
                f"the record has {len(unmarked)} phase(s) the worker never marked to its "
                f"parent (first: cycle {first.cycle}, phase {first.phase})"
            )
    return lines


def ending(run: RunRecord | None, facts: Streamed, failure: Failure | None) -> Failure | None:
    """How the row ended, the streamed facts held against the record: a streamed problem
    is ``corrupted`` whatever the record says (over a lost or broken record too), a
    contradiction ``inconsistent``; any other ending stays."""
    lines = contradictions(run, facts)
    if facts.problems and (failure is None or failure.kind in OVERRIDDEN):
        more = f" (+{len(facts.problems) - 1} more)" if len(facts.problems) > 1 else ""
        told = [failure.message] if failure is not None else []
        missing = run is None or any(p not in run.integrity for p in facts.problems)
        if not lines and not told and not missing:
            return None  # the record says it too: its own verdict, with every reason
        tail = "; ".join([*lines, *told])
        message = facts.problems[0] + more + (f"; {tail}" if tail else "")
        code = failure.exit_code if failure is not None else None
        return Failure(kind="corrupted", message=message, exit_code=code)
    if lines and failure is None and (run is None or run.failure is None):
        return Failure(kind="inconsistent", message="; ".join(lines))
    return failure
