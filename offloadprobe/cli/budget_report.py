"""Shared end of every verb that judges rows: print what failed, exit 0/1 by the verdicts."""

from __future__ import annotations

import sys

from offloadprobe.core.budgets import Breach
from offloadprobe.core.errors import RowsFailed
from offloadprobe.core.outcomes import Verdict


def enforce(rows: list[tuple[str, Verdict, list[Breach]]]) -> None:
    """One line per broken budget and per failed row on stderr, then ``RowsFailed``
    (exit 1) unless every row is ok."""
    for _, _, breaches in rows:
        for breach in breaches:
            print(f"budget exceeded: {breach.line()}", file=sys.stderr)
    failed = [(label, verdict) for label, verdict, _ in rows if not verdict.ok]
    if not failed:
        return
    if len(failed) == 1:
        label, verdict = failed[0]
        error = RowsFailed(f"{label}: {verdict.line()}")
        error.kind = verdict.kind  # a child's parent reads the row's own kind
        raise error
    for label, verdict in failed:
        print(f"failed: {label}: {verdict.line()}", file=sys.stderr)
    raise RowsFailed(
        f"{len(failed)} of {len(rows)} rows failed: "
        + ", ".join(f"{label} ({verdict.kind})" for label, verdict in failed)
    )
