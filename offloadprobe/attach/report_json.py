"""attach's JSON document (``--json F``). Stable keys:

``job_exit_code`` (the job's status: its code, 128+N for signal N), ``job_signal``,
``exit_code`` (attach's), ``command``, ``seconds``, ``calls`` (each: ``phase``, ``target``,
``pid``, ``rank``, ``local_rank``, ``node_rank``, ``host``, ``index``, ``depth``,
``parent``, ``seconds``, ``raised``, ``error``, ``host_before_bytes``,
``host_after_bytes``, ``host_peak_bytes`` (the call's peak RSS less its starting RSS),
``host_peak_method``, ``host_growth_bytes``, the ``pinned_*`` and ``gpu_*`` fields,
``device_moved_bytes``, ``node_*``), ``phases``, ``ranks``, ``nodes``, ``processes``,
``not_instrumented``, ``never_called``, ``breaches``, ``not_judged``, ``notes``.
Bytes are integers; null is "not measured". ``schema_version`` is every verb's
(``core.records.SCHEMA_VERSION``); files written before it say ``"schema": 1``
(:func:`schema_version_of` reads either). Schema: ``offloadprobe/schemas/attach.schema.json``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from offloadprobe.attach.records import Call, JobRecord
from offloadprobe.attach.run import exit_status
from offloadprobe.attach.verdict import exit_code
from offloadprobe.core.records import SCHEMA_VERSION

OLD_KEY = "schema"
"""The key attach's documents carried their version in before ``schema_version`` (1)."""


def schema_version_of(doc: dict[str, Any]) -> int | None:
    """A saved attach document's version: ``schema_version``, or an older file's
    ``schema``; None where it has neither."""
    version = doc.get("schema_version", doc.get(OLD_KEY))
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
        "schema_version": SCHEMA_VERSION,
        "job_exit_code": exit_status(record.exit_code),
        "job_signal": -record.exit_code if record.exit_code < 0 else None,
        "exit_code": exit_code(record),
        "command": list(record.command),
        "seconds": record.seconds,
        "calls": [c.to_json() for c in record.calls],
        "phases": [_plain(p) for p in record.phases],
        "ranks": [_plain(r) for r in record.ranks],
        "nodes": [_plain(n) for n in record.nodes],
        "processes": [_plain(p) for p in record.processes],
        "not_instrumented": [_plain(u) for u in record.uninstrumented],
        "never_called": [p.name for p in record.never_called],
        "breaches": [_plain(b) for b in record.breaches],
        "not_judged": list(record.unjudged),
        "notes": list(record.notes),
        "records_dir": record.out_dir,
    }
