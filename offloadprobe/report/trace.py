"""Chrome/Perfetto trace-event JSON from timelines and the runs' exact records.

One process track per process: per rank for ``run`` (pid = rank), per row for
``compare`` (pid = row index), named with ``M`` metadata events. On each, thread 0
holds one complete (``X``) slice per phase and cycle, whose args are the phase's
exact readings (``PhaseRecord``); every sampled series is a counter (``C``) track.
Counter values are samples: the trace's ``otherData`` and every slice say so.
Times are microseconds since each process's own sampler epoch; ``compare`` rows are
separate processes run one after another, so each starts at 0.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import PhaseRecord, RunRecord
from offloadprobe.measure.timeline import BUSY, GAP_CAUSES, LEFT_OUT, SAMPLED_NOTE, Timeline
from offloadprobe.report.output import announce
from offloadprobe.report.trace_format import validate

PHASE_THREAD = 0
GAP_THREADS = {"process": 1, "thread": 2}
GAP_NOTES = {
    BUSY: "counter values across this stretch were not read",
    LEFT_OUT: "read, and left out: RSS between two states while the emulated device moved",
}
"""Threads holding one slice per stretch without a sample, per sampler."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceRow:
    """One process track: a label, its run's records, and its timeline."""

    pid: int
    label: str
    run: RunRecord | None
    timeline: Timeline | None
    emulated: bool = False


def _us(ns: int) -> float:
    return ns / 1000.0


def _phase_args(rec: PhaseRecord | None) -> dict[str, Any]:
    if rec is None:
        return {"exact readings": "none: the phase did not complete"}
    return {
        "exact": "per-phase peaks from VmHWM (reset via clear_refs) and allocator peak counters",
        "host peak bytes": rec.host.peak,
        "host peak method": rec.host.method,
        "pinned reserved peak bytes": rec.pinned.reserved_peak if rec.pinned else None,
        "gpu allocated peak bytes": rec.gpu.allocated_peak if rec.gpu else None,
        "seconds": rec.seconds,
        "bytes moved": rec.bytes_moved,
        "GB/s": rec.gbps,
        "readings": asdict(rec),
    }


def _process_events(row: TraceRow) -> list[dict[str, Any]]:
    pid = row.pid
    events: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": pid,
            "tid": PHASE_THREAD,
            "args": {"name": row.label},
        },
        {
            "name": "process_sort_index",
            "ph": "M",
            "pid": pid,
            "tid": PHASE_THREAD,
            "args": {"sort_index": pid},
        },
        {
            "name": "thread_name",
            "ph": "M",
            "pid": pid,
            "tid": PHASE_THREAD,
            "args": {"name": "phases (exact readings in args)"},
        },
    ]
    timeline = row.timeline
    if timeline is None:
        return events
    run = row.run
    measured = ([run.construction] if run and run.construction else []) + (
        run.phases if run else []
    )
    records = {(r.cycle, r.phase): r for r in measured}
    for span in timeline.spans:
        args = _phase_args(records.get((span.cycle, span.phase)))
        args["cycle"] = span.cycle
        events.append(
            {
                "name": span.phase,
                "cat": "phase",
                "ph": "X",
                "pid": pid,
                "tid": PHASE_THREAD,
                "ts": _us(span.start_ns),
                "dur": _us(max(0, span.end_ns - span.start_ns)),
                "args": args,
            }
        )
    for sampler, tid in GAP_THREADS.items():
        gaps = [g for g in timeline.gaps if g.sampler == sampler]
        if not gaps:
            continue
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"no samples from the sampling {sampler}"},
            }
        )
        events += [
            {
                "name": f"no samples ({GAP_CAUSES[g.cause]})",
                "cat": "sampling",
                "ph": "X",
                "pid": pid,
                # Whole microseconds: two gaps around one sample touch without overlapping.
                "tid": tid,
                "ts": g.start_ns // 1000,
                "dur": g.end_ns // 1000 - g.start_ns // 1000,
                "args": {"note": GAP_NOTES[g.cause], "cause": g.cause},
            }
            for g in gaps
        ]
    for series in timeline.series:
        name = f"{series.label} (sampled)"
        times, values = list(series.times_ns), list(series.values)
        if times and timeline.end_ns > times[-1]:
            times.append(timeline.end_ns)
            values.append(values[-1])
        # Whole microseconds: ample for 1 kHz samples, and a third smaller a file.
        events += [
            {"name": name, "ph": "C", "pid": pid, "ts": t // 1000, "args": {"bytes": v}}
            for t, v in zip(times, values, strict=True)
        ]
    return events


def trace_document(rows: list[TraceRow], *, context: dict[str, Any] | None = None) -> dict:
    """The whole trace: every row's process track, metadata in ``otherData``."""
    events = [e for row in rows for e in _process_events(row)]
    notes = {
        row.label: [n for n in row.timeline.notes if n != SAMPLED_NOTE]
        for row in rows
        if row.timeline is not None
    }
    missing = [row.label for row in rows if row.timeline is None]
    other: dict[str, Any] = {"offloadprobe": SAMPLED_NOTE, "sampler notes": notes}
    if missing:
        other["no timeline"] = missing
    if any(row.emulated for row in rows):
        other["emulation"] = "CPU emulation: device buffers live in host RSS, no pinned memory"
    other.update(context or {})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(doc: dict[str, Any], path: Path) -> None:
    """Validate (a failure is a bug here, not the user's) and write; gzipped for ``.gz``."""
    problems = validate(doc)
    if problems:
        raise AssertionError("trace does not follow the trace-event format: " + problems[0])
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".gz":
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        else:
            path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write --trace {path}: {exc.strerror}") from None
    announce(path, "--trace", " (open it in ui.perfetto.dev)")
