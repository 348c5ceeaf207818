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

The grammar is every verb's (``core.budgets.ratio_or_size``: ``1.1x`` or a size; the node
peak a size, as ``--max-gpu-residual``), and so is the breach (``core.budgets.Breach``: the
call's label where a run's has the row's) and the outcome (``core.outcomes.Verdict``).

Outcome, first that applies: the job failed (``killed`` by a signal, ``crashed`` with a
non-zero code; ``interrupted`` where attach itself was stopped by the signal it passed
on), a process escaped its memory cgroup (``escaped``), a cgroup peak reset inside the
job (``inconsistent``), a breach (``over budget``), a named phase that could not be
measured at all (its function not found in its module, or not wrapped; its module never
imported by any process of the job), a job with nothing to measure (no phase named, no
``offloadprobe.phase`` block recorded) or, with ``--require-calls``, a named phase never
called or a Python process (or a new image in one) that ran uninstrumented (``not
measured``); else ``ok``. Exit code: every verb's, the verdict's (0 ok, 1 any failure, 2
bad input, raised as ``UsageError`` before the job starts), and 128+N where attach was
interrupted by signal N (the verbs' code for an interrupted parent). The job's own status
stays in the record and the report (``job_exit_code``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from offloadprobe.attach.records import Call, JobRecord
from offloadprobe.attach.run import exit_status
from offloadprobe.core.budgets import Breach, ratio_or_size
from offloadprobe.core.errors import UsageError
from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.units import format_bytes, format_ratio, parse_size

FLAGS = {
    "--max-host-peak": "host_peak",
    "--max-host-growth": "host_growth",
    "--max-node-peak": "node_peak",
}
"""attach's budget flags, and the ``Budgets`` field each sets."""
WHAT = {"--max-host-peak": "host peak", "--max-host-growth": "host growth"}


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


def parse_limit(flag: str, text: str, *, ratio: bool, allow_zero: bool = True) -> Limit:
    """``40GiB`` or, where ``ratio``, ``1.1x``, in every verb's grammar; a UsageError
    says how to write it."""
    if not ratio:
        return Limit(flag=flag, text=text, nbytes=parse_size(text, what=flag, allow_zero=True))
    value, nbytes = ratio_or_size(text, flag, allow_zero=allow_zero)
    return Limit(flag=flag, text=text, nbytes=nbytes, ratio=value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Budgets:
    host_peak: Limit | None = None
    host_growth: Limit | None = None
    node_peak: Limit | None = None

    @classmethod
    def parse(
        cls, *, host_peak: str | None, host_growth: str | None, node_peak: str | None
    ) -> Budgets:
        peak, growth, node = host_peak, host_growth, node_peak
        return cls(
            host_peak=parse_limit("--max-host-peak", peak, ratio=True, allow_zero=False)
            if peak is not None
            else None,
            host_growth=parse_limit("--max-host-growth", growth, ratio=True)
            if growth is not None
            else None,
            node_peak=parse_limit("--max-node-peak", node, ratio=False)
            if node is not None
            else None,
        )

    @classmethod
    def from_words(cls, words: tuple[str, ...] | list[str], *, where: str) -> Budgets:
        """The budgets a saved document names (``--max-host-peak 40GiB``, as ``words``
        gives them back), by the same parser; anything else is bad input, one line."""
        given: dict[str, str | None] = dict.fromkeys(FLAGS.values())
        for word in words:
            flag, _, value = str(word).strip().partition(" ")
            if flag not in FLAGS or not value.strip():
                raise UsageError(
                    f"{where}: budget {word!r} is not one attach sets (it has "
                    f"{', '.join(FLAGS)} and a value): give a file attach's --json wrote"
                )
            given[FLAGS[flag]] = value.strip()
        try:
            return cls.parse(**given)
        except UsageError as exc:
            raise UsageError(f"{where}: its budgets: {exc}") from None

    @property
    def words(self) -> tuple[str, ...]:
        """The budgets as the user gave them: ``--max-host-peak 40GiB``."""
        limits = (self.host_peak, self.host_growth, self.node_peak)
        return tuple(limit.shown for limit in limits if limit is not None)


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
        what = WHAT[limit.flag]
        if limit.nbytes is not None:
            if measured > limit.nbytes:
                message = f"{what} {format_bytes(measured)} > {format_bytes(limit.nbytes)}"
                breaches.append(Breach(call.label, limit.flag, message))
            continue
        moved = call.device_moved_bytes
        if not moved:
            skipped += 1
            continue
        ratio = measured / moved
        if limit.ratio is not None and ratio > limit.ratio:
            message = f"{what} {format_ratio(ratio)} > {format_ratio(limit.ratio)}"
            breaches.append(Breach(call.label, limit.flag, message))
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
                message = (
                    f"node peak {format_bytes(node.node_peak_bytes)} > {format_bytes(limit.nbytes)}"
                )
                where = f"node {node.host} ({node.node_peak_method})"
                breaches.append(Breach(where, limit.flag, message))
    return replace(
        record, breaches=tuple(breaches), unjudged=tuple(unjudged), budgets=budgets.words
    )


def job_status(record: JobRecord) -> str:
    """``exit 3``, or ``killed by signal 9 (status 137)``."""
    if record.exit_code < 0:
        return f"killed by signal {-record.exit_code} (status {exit_status(record.exit_code)})"
    return f"exit {record.exit_code}"


def outcome(record: JobRecord) -> Verdict:
    """The job's verdict, from its record only (see the module's text)."""
    return _judged(record)[0]


def phrase(record: JobRecord) -> str:
    """What the report's verdict line says of it (``ok``, ``job failed: exit 3``...)."""
    return _judged(record)[1]


def _judged(record: JobRecord) -> tuple[Verdict, str]:
    if record.exit_code != 0:
        if record.interrupted is not None:
            kind = "interrupted"
        else:
            kind = "killed" if record.exit_code < 0 else "crashed"
        status = job_status(record)
        return Verdict(kind=kind, detail=f"job {status}"), f"job failed: {status}"
    if record.escaped:
        pids = ", ".join(str(e.pid) for e in record.escaped)
        detail = f"pid {pids} left the job's memory cgroups (see above)"
        return Verdict(kind="escaped", detail=detail), f"escaped: {detail}"
    if record.peak_resets:
        detail = "peak reset inside the job: its cgroup peaks are not whole"
        return Verdict(kind="inconsistent", detail=detail), detail
    if record.breaches:
        reasons = tuple(b.line() for b in record.breaches)
        shown = f"over budget ({len(record.breaches)} breach(es))"
        return Verdict(kind="over budget", detail=reasons[0], reasons=reasons), shown
    return _measured(record)


def _measured(record: JobRecord) -> tuple[Verdict, str]:
    if record.unmeasured:
        names = ", ".join(p.name for p in record.unmeasured)
        detail = f"phase(s) {names} (see above)"
        shown = f"not measured: {detail}"
    elif record.nothing_named:
        how = (
            "name a function with --phase or --preset, or mark the job's code with "
            "offloadprobe.phase"
        )
        detail, shown = f"no phase named: {how}", f"nothing measured: {how}"
    elif record.require_calls and record.never_called:
        names = ", ".join(p.name for p in record.never_called)
        detail = shown = f"phase(s) never called with --require-calls: {names}"
    elif record.uninstrumented_fails:
        pids = ", ".join(str(u.pid) for u in record.uninstrumented)
        detail = shown = f"not instrumented with --require-calls: pid {pids} (see above)"
    else:
        return Verdict(kind="ok"), "ok"
    return Verdict(kind="not measured", detail=detail), shown


def exit_code(record: JobRecord) -> int:
    """See the module's text."""
    if record.exit_code != 0 and record.interrupted is not None:
        return 128 + record.interrupted
    return outcome(record).exit_code
