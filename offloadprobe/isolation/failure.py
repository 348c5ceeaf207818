"""A child that left no usable record, as a typed ``ChildFailure`` (timed out, killed,
bad input or crashed). A child that wrote its record is judged from the record."""

from __future__ import annotations

from offloadprobe.core.records import ChildFailure
from offloadprobe.isolation.child import ChildOutcome


def failure_of(outcome: ChildOutcome) -> ChildFailure | None:
    """None when the child wrote a record to judge; else how it ended."""
    if outcome.report is not None and outcome.report.get("runs"):
        return None
    code, text = outcome.exit_code, outcome.verdict
    if code == 124 and text.startswith("timed out"):
        kind, message = "timed out", text.removeprefix("timed out ")
    elif code < 0:
        kind, message = "killed", text.removeprefix("killed by ")
        if "out of memory" in message and "cgroup oom_kill" in message:
            message = message.replace(": out of memory (cgroup ", ", cgroup OOM (")
    elif code == 2:
        kind, message = "bad input", text
    else:
        kind, message = "crashed", text or f"exit code {code}"
    return ChildFailure(kind=kind, message=message, exit_code=code)
