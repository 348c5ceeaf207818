"""attach's JSON document (``--json F``), and the record read back from it (``show``).

Stable keys: ``kind`` (``attach``), ``schema_version`` (every verb's,
``core.records.SCHEMA_VERSION``; files written before it say ``"schema": 1``, and
:func:`schema_version_of` reads either), ``job_exit_code`` (the job's status: its code,
128+N for signal N), ``job_signal``, ``exit_code`` (attach's), ``command``, ``seconds``,
``require_calls``, ``calls`` (each: ``phase``, ``target``, ``pid``, ``rank``,
``local_rank``, ``node_rank``, ``host``, ``index``, ``depth``, ``parent``, ``seconds``,
``raised``, ``error``, ``host_before_bytes``, ``host_after_bytes`` (RSS), ``rss_peak_bytes``
(the call's peak RSS less its starting RSS), ``host_peak_method``, ``group_before_bytes``,
``group_after_bytes``, ``group_peak_bytes`` (the process's own cgroup, read by attach),
``host_peak_bytes`` and ``host_growth_bytes`` (the larger of the two views: what
budgets judge), ``host_peak_by``, the ``pinned_*`` and ``gpu_*`` fields,
``device_moved_bytes``, ``node_*``), ``phases``,
``growth`` (per phase and rank: ``host_growth_bytes`` and ``pinned_growth_bytes``, after
the last call less after the first), ``ranks``, ``nodes``, ``processes``,
``not_instrumented`` (each with ``after_exec``), ``escaped``, ``peak_resets``,
``never_called``, ``not_measured``, ``breaches`` (every verb's: ``strategy``, the call or
node; ``budget``, the flag; ``message``; ``kind``), ``budgets`` (as given), ``outcome``
(every verb's verdict record: ``kind``, ``detail``, ``reasons``...), ``interrupted`` (the
signal attach passed on), ``not_judged``, ``notes``. Bytes are integers; null is "not
measured". Files of schema 5 and before have breaches of ``budget`` (flag and value),
``value``, ``limit`` and ``where``, and no ``budgets`` or ``outcome``: they read back
(their budgets are then not judged again). Schema:
``offloadprobe/schemas/attach.schema.json``.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from offloadprobe.attach.collect import summarise_growth
from offloadprobe.attach.records import (
    Call,
    Escaped,
    JobRecord,
    NodeSummary,
    PhaseGrowth,
    PhaseSummary,
    Process,
    RankSummary,
    Uninstrumented,
)
from offloadprobe.attach.run import exit_status
from offloadprobe.attach.verdict import exit_code, outcome
from offloadprobe.core.budgets import Breach
from offloadprobe.core.records import SCHEMA_VERSION
from offloadprobe.core.serial import rebuild

KIND = "attach"
SCHEMA_KEYS = ("schema_version", "schema")
"""Where a document says its version: ``schema_version``, or an older file's ``schema``."""


def schema_version_of(doc: dict[str, Any]) -> int | None:
    """A saved attach document's version: ``schema_version``, or an older file's
    ``schema``; None where it has neither."""
    version = doc.get("schema_version", doc.get("schema"))
    return int(version) if isinstance(version, int) else None


def _plain(obj: Any) -> Any:
    if isinstance(obj, Call):
        return obj.to_json()
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def attach_json(record: JobRecord) -> dict[str, Any]:
    """The document, from the record only."""
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "job_exit_code": exit_status(record.exit_code),
        "job_signal": -record.exit_code if record.exit_code < 0 else None,
        "exit_code": exit_code(record),
        "command": list(record.command),
        "seconds": record.seconds,
        "require_calls": record.require_calls,
        "calls": [c.to_json() for c in record.calls],
        "phases": [_plain(p) for p in record.phases],
        "growth": [_plain(g) for g in record.growth],
        "ranks": [_plain(r) for r in record.ranks],
        "nodes": [_plain(n) for n in record.nodes],
        "processes": [_plain(p) for p in record.processes],
        "not_instrumented": [_plain(u) for u in record.uninstrumented],
        "escaped": [_plain(e) for e in record.escaped],
        "peak_resets": list(record.peak_resets),
        "never_called": [p.name for p in record.never_called],
        "not_measured": [p.name for p in record.unmeasured],
        "breaches": [asdict(b) for b in record.breaches],
        "budgets": list(record.budgets),
        "outcome": asdict(outcome(record)),
        "interrupted": record.interrupted,
        "not_judged": list(record.unjudged),
        "notes": list(record.notes),
        "records_dir": record.out_dir,
    }


def is_attach_json(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` is attach's document (older ones have no ``kind``: by their keys)."""
    if doc.get("kind") == KIND:
        return True
    return any(k in doc for k in SCHEMA_KEYS) and {"job_exit_code", "calls", "phases"} <= set(doc)


def _older_call(call: dict[str, Any]) -> dict[str, Any]:
    """A call written before the cgroup view: its ``host_peak_bytes`` was the RSS view."""
    if "rss_peak_bytes" in call or "host_peak_bytes" not in call:
        return call
    return {**call, "rss_peak_bytes": call["host_peak_bytes"]}


def _breach(doc: dict[str, Any]) -> Breach:
    """A breach as written: every verb's, or (schema 5 and before) attach's own, whose
    ``budget`` was the flag with its value."""
    if "where" in doc and "strategy" not in doc:
        flag = str(doc["budget"]).split(" ", 1)[0]
        return Breach(str(doc["where"]), flag, f"{doc['value']} > {doc['limit']}")
    breach: Breach = rebuild(Breach, doc)
    return breach


def record_from_json(doc: dict[str, Any]) -> JobRecord:
    """The record ``attach_json`` was made from (what the report is rendered from)."""
    signal = doc.get("job_signal")

    def each(cls: type, key: str) -> tuple[Any, ...]:
        return tuple(rebuild(cls, item) for item in doc.get(key) or ())

    calls = tuple(rebuild(Call, _older_call(c)) for c in doc.get("calls") or ())
    growth = each(PhaseGrowth, "growth") if "growth" in doc else tuple(summarise_growth(calls))
    return JobRecord(
        command=tuple(doc["command"]),
        exit_code=-int(signal) if signal else int(doc["job_exit_code"]),
        seconds=float(doc["seconds"]),
        out_dir=doc.get("records_dir"),
        calls=calls,
        phases=each(PhaseSummary, "phases"),
        ranks=each(RankSummary, "ranks"),
        nodes=each(NodeSummary, "nodes"),
        processes=each(Process, "processes"),
        uninstrumented=each(Uninstrumented, "not_instrumented"),
        growth=growth,
        notes=tuple(doc.get("notes") or ()),
        breaches=tuple(_breach(b) for b in doc.get("breaches") or ()),
        budgets=tuple(doc.get("budgets") or ()),
        unjudged=tuple(doc.get("not_judged") or ()),
        require_calls=bool(doc.get("require_calls", False)),
        escaped=each(Escaped, "escaped"),
        peak_resets=tuple(doc.get("peak_resets") or ()),
        interrupted=doc.get("interrupted"),
    )
