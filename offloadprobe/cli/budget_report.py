"""Shared end of every verb that judges rows: name what failed, exit by the verdicts."""

from __future__ import annotations

import sys

from offloadprobe.core.budgets import Breach
from offloadprobe.core.errors import RowsFailed
from offloadprobe.core.outcomes import Verdict


def _breach_line(breach: Breach) -> str:
    head = "budget exceeded" if breach.kind == "over budget" else breach.kind
    return f"{head}: {breach.line()}"


def _failed_text(label: str, verdict: Verdict, breaches: list[Breach]) -> str:
    """A row broken by budgets: its kind and the flags (the report above gives the
    figures, once); any other failure: its whole verdict."""
    if breaches:
        flags = ", ".join(dict.fromkeys(b.budget for b in breaches))
        return f"{label}: {verdict.kind} ({flags})"
    return f"{label}: {verdict.line()}"


def enforce(rows: list[tuple[str, Verdict, list[Breach]]]) -> None:
    """Print each broken budget once, then raise ``RowsFailed`` (exit 1, or 2 where a row
    was bad input) unless every row passes: ok, or the failure a canary row expects.

    The verdict the report printed names a row's first breach; only the others get a
    line here. The last line names every failed row.
    """
    for _, verdict, breaches in rows:
        if not verdict.passes:
            for breach in breaches[1:]:
                print(_breach_line(breach), file=sys.stderr)
    failed = [(label, v, b) for label, v, b in rows if not v.passes]
    if not failed:
        return
    code = max(v.exit_code for _, v, _ in failed)
    if len(failed) == 1:
        label, verdict, breaches = failed[0]
        error = RowsFailed(_failed_text(label, verdict, breaches))
        error.kind = verdict.kind  # a child's parent reads the row's own kind
        error.exit_code = code
        raise error
    for label, verdict, breaches in failed:
        if not breaches:  # a breach is in the report already
            print(f"failed: {label}: {verdict.line()}", file=sys.stderr)
    error = RowsFailed(
        f"{len(failed)} of {len(rows)} rows failed: "
        + ", ".join(f"{label} ({verdict.kind})" for label, verdict, _ in failed)
    )
    error.exit_code = code
    raise error


def row_payload(cfg: object, ranks: int = 1) -> int | None:
    """The ``param_data`` bytes a row of ``cfg`` will move, from its flags alone (the probe
    model's layout, ``plan.probe``), for the checks made before anything runs; None where
    the flags alone do not say it (several ranks split the model, frozen parameters leave
    the DDP buffers): the row's own record says it after it ran."""
    from offloadprobe.plan.probe import probe_payload

    model = cfg.model
    if ranks > 1 or model.frozen_fraction:
        return None
    return probe_payload(model)
