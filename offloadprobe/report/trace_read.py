"""A trace written by ``--trace`` read back into timelines, one per process track.

What it holds is what the process sampled (the counter tracks), its phase spans and its
stretches without samples, on the trace's whole-microsecond clock: enough to draw the
plot again (``offloadprobe show RESULT.json --trace T.json --plot P.png``) with the exact
per-phase figures taken from the result's records, never from the samples.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.measure.timeline import BUSY, Gap, PhaseSpan, Series, Timeline
from offloadprobe.report.trace import GAP_THREADS, PHASE_THREAD

KEYS = {
    "host RSS": "host.rss",
    "RssAnon": "host.anon",
    "RssShmem": "host.shmem",
    "cgroup usage": "cgroup.current",
    "GPU allocated": "gpu.allocated",
    "GPU reserved": "gpu.reserved",
    "pinned reserved": "pinned.reserved",
    "pinned in use": "pinned.in_use",
    "device memory in use": "gpu.device_used",
}
"""Each counter track's label (``measure/sampler.py``) and the series key plots draw."""

SAMPLED = " (sampled)"


def _ns(microseconds: Any) -> int:
    return round(float(microseconds) * 1000)


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        doc = json.loads(text)
    except (OSError, EOFError, ValueError) as exc:  # EOFError: a truncated .gz
        raise UsageError(f"--trace {path}: not a trace offloadprobe wrote ({exc})") from exc
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise UsageError(f"--trace {path}: no traceEvents; give a file --trace wrote")
    return events


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    """A trace read back: each track's timeline, and each track's phases with the exact
    host peak its slice carries from the run's own records (``host peak bytes``), what
    ties the trace to the result it came with; both by the track's label."""

    timelines: dict[str, Timeline]
    peaks: dict[str, dict[tuple[int, str], int]]


def read_trace(path: Path) -> Trace:
    """Every process track of the trace at ``path``; a trace whose events are not the
    shape ``--trace`` writes is bad input (one line), never a traceback."""
    events = _events(path)
    try:
        return _tracks(events)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise UsageError(
            f"--trace {path}: not a trace offloadprobe wrote (a malformed event, "
            f"{type(exc).__name__}: {exc})"
        ) from None


def _tracks(events: list[Any]) -> Trace:
    labels = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    samplers = {tid: name for name, tid in GAP_THREADS.items()}
    timelines = {pid: Timeline(interval_ns=0, rank=pid) for pid in labels}
    series: dict[tuple[int, str], Series] = {}
    peaks: dict[int, dict[tuple[int, str], int]] = {pid: {} for pid in labels}
    for e in events:
        timeline = timelines.get(e.get("pid"))
        if timeline is None:
            continue
        ts = _ns(e.get("ts", 0))
        if e["ph"] == "X" and e.get("tid") == PHASE_THREAD:
            end = ts + _ns(e.get("dur", 0))
            args = e.get("args", {})
            cycle = int(args.get("cycle", 0))
            timeline.spans.append(PhaseSpan(cycle=cycle, phase=e["name"], start_ns=ts, end_ns=end))
            if "host peak bytes" in args:
                peaks[e["pid"]][(cycle, str(e["name"]))] = int(args["host peak bytes"])
        elif e["ph"] == "X" and e.get("tid") in samplers:
            end = ts + _ns(e.get("dur", 0))
            cause = (e.get("args") or {}).get("cause", BUSY)
            timeline.gaps.append(
                Gap(sampler=samplers[e["tid"]], start_ns=ts, end_ns=end, cause=cause)
            )
        elif e["ph"] == "C":
            label = str(e["name"]).removesuffix(SAMPLED)
            key = (e["pid"], label)
            if key not in series:
                series[key] = Series(name=KEYS.get(label, label), label=label)
                timeline.series.append(series[key])
            series[key].append(ts, int(e["args"]["bytes"]))
            timeline.end_ns = max(timeline.end_ns, ts)
            timeline.ticks += 1
    return Trace(
        timelines={labels[pid]: t for pid, t in timelines.items()},
        peaks={labels[pid]: found for pid, found in peaks.items()},
    )
