"""Budgets for a job whose payload is unknown, and the exit code.

* ``--max-host-peak 40GiB``: every call's host peak over its start (the larger of its
  RSS view and its cgroup view, ``Call.host_peak_bytes``); or ``1.1x``: that peak over
  the device bytes the call freed (an offload) or took (a load), where those are
  measured (CUDA initialised in the process) and not zero; other calls are listed as not
  judged, never passed silently.
* ``--max-host-growth 1GiB`` (or ``x``): every call's after less before (the larger of
  the two views, ``Call.host_growth_bytes``).
* ``--max-node-peak 1700GiB``: the job cgroup's peak over the whole run (or, without a
  cgroup, the process tree's sampled RSS, as the report says).

Exit code: the job's own status when it failed (its code, or 128+N for signal N: never
0); else 1 for a process that escaped its memory cgroup, for a cgroup peak reset inside
the job, for a breach, for a named phase that could not be measured at all (its
function not found in its module, or not wrapped; its module never imported by any
process of the job), for a job with nothing to measure (no phase named, no
``offloadprobe.phase`` block recorded) or, with ``--require-calls``, for a named phase
never called or a Python process (or a new image in one) that ran uninstrumented; else
0. Bad input is 2, raised as ``UsageError`` before the job starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from offloadprobe.attach.records import Breach, Call, JobRecord
from offloadprobe.attach.run import exit_status
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import MissingUnit, format_bytes, format_ratio, parse_size

_RATIO = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*x\s*$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """One budget: bytes, or a multiple of the device bytes a call moved."""

    flag: str
    text: str
    nbytes: int | None = None
    ratio: float | None = None

    @property
    def shown(self) -> str:
        return f"{self.flag} {self.text}"


def parse_limit(flag: str, text: str, *, ratio: bool) -> Limit:
    """``40GiB`` or, where ``ratio``, ``1.1x``; a UsageError says how to write it."""
    match = _RATIO.match(text)
    if match:
        if not ratio:
            raise UsageError(f"{flag} {text!r}: give bytes, e.g. {flag} 1700GiB (not a ratio)")
        value = float(match.group(1))
        if value <= 0:
            raise UsageError(f"{flag} {text!r} must be positive, e.g. {flag} 1.1x")
        return Limit(flag=flag, text=text, ratio=value)
    try:
        return Limit(flag=flag, text=text, nbytes=parse_size(text, what=flag, allow_zero=True))
    except MissingUnit as err:
        if not ratio:
            raise
        raise MissingUnit(f"{err}, or a multiple, e.g. {text.strip()}x") from None
    except UsageError:
        example = f"{flag} 40GiB" + (f" or {flag} 1.1x" if ratio else "")
        raise UsageError(f"cannot parse {flag} {text!r}: write it as {example}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class Budgets:
    host_peak: Limit | None = None
    host_growth: Limit | None = None
    node_peak: Limit | None = None

    @classmethod
    def parse(
        cls, *, host_peak: str | None, host_growth: str | None, node_peak: str | None
    ) -> Budgets:
        return cls(
            host_peak=parse_limit("--max-host-peak", host_peak, ratio=True) if host_peak else None,
            host_growth=(
                parse_limit("--max-host-growth", host_growth, ratio=True) if host_growth else None
            ),
            node_peak=parse_limit("--max-node-peak", node_peak, ratio=False) if node_peak else None,
        )


def _judge_calls(
    calls: tuple[Call, ...],
    limit: Limit,
    value: Callable[[Call], int],
    breaches: list[Breach],
    unjudged: list[str],
) -> None:
    skipped = 0
    for call in calls:
        measured = value(call)
        if limit.nbytes is not None:
            if measured > limit.nbytes:
                breaches.append(
                    Breach(
                        budget=limit.shown,
                        value=format_bytes(measured),
                        limit=format_bytes(limit.nbytes),
                        where=call.label,
                    )
                )
            continue
        moved = call.device_moved_bytes
        if not moved:
            skipped += 1
            continue
        ratio = measured / moved
        if limit.ratio is not None and ratio > limit.ratio:
            breaches.append(
                Breach(
                    budget=limit.shown,
                    value=format_ratio(ratio),
                    limit=format_ratio(limit.ratio),
                    where=call.label,
                )
            )
    if skipped:
        unjudged.append(
            f"{limit.shown}: {skipped} of {len(calls)} call(s) not judged (no device bytes "
            "moved, or none measured: CUDA not initialised in that process)"
        )


def judge(record: JobRecord, budgets: Budgets) -> JobRecord:
    """The record with every breach of ``budgets`` and every budget it could not apply."""
    breaches: list[Breach] = []
    unjudged: list[str] = []
    if budgets.host_peak is not None:
        _judge_calls(
            record.calls, budgets.host_peak, lambda c: c.host_peak_bytes, breaches, unjudged
        )
    if budgets.host_growth is not None:
        _judge_calls(
            record.calls, budgets.host_growth, lambda c: c.host_growth_bytes, breaches, unjudged
        )
    limit = budgets.node_peak
    if limit is not None and limit.nbytes is not None:
        peaks = [n for n in record.nodes if n.node_peak_bytes is not None]
        if not peaks:
            unjudged.append(f"{limit.shown}: no node peak measured")
        for node in peaks:
            if node.node_peak_bytes > limit.nbytes:
                breaches.append(
                    Breach(
                        budget=limit.shown,
                        value=format_bytes(node.node_peak_bytes),
                        limit=format_bytes(limit.nbytes),
                        where=f"node {node.host} ({node.node_peak_method})",
                    )
                )
    return replace(record, breaches=tuple(breaches), unjudged=tuple(unjudged))


def exit_code(record: JobRecord) -> int:
    """See the module's text."""
    if record.exit_code != 0:
        return exit_status(record.exit_code)
    if record.escaped or record.peak_resets:
        return 1
    if record.breaches or record.unmeasured or record.nothing_named:
        return 1
    if record.require_calls and (record.never_called or record.uninstrumented):
        return 1
    return 0
