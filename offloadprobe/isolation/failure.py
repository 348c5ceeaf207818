"""A child that left no usable record, as its typed ``ChildFailure``. A child that wrote
its record is judged from the record (``core.verdicts.judge``)."""

from __future__ import annotations

from offloadprobe.core.records import ChildFailure
from offloadprobe.isolation.child import ChildOutcome


def failure_of(outcome: ChildOutcome) -> ChildFailure | None:
    """None when the child wrote a record to judge; else how it ended (never parsed text)."""
    if outcome.report is not None and outcome.report.get("runs"):
        return None
    if outcome.failure is not None:
        return outcome.failure
    return ChildFailure(
        kind="crashed", message="exited without writing its record", exit_code=outcome.exit_code
    )
