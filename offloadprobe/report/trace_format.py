"""A validator for the trace-event JSON that Chrome's trace viewer and Perfetto read.

Checks the documented required fields of each event type offloadprobe writes (and
rejects any other), following the Trace Event Format document: the JSON object form
(``traceEvents`` list, optional ``displayTimeUnit`` of ``ms`` or ``ns``), ``ph`` one
letter, ``ts`` in microseconds, ``pid``/``tid`` integers, complete events (``X``) with
a non-negative ``dur``, counters (``C``) with numeric ``args`` values, metadata
(``M``) with a known name and its ``args`` key. Complete events on one thread must
nest or follow each other: viewers draw partial overlaps wrongly.
"""

from __future__ import annotations

from typing import Any

METADATA_ARGS = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}
REQUIRED = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "C": ("name", "ts", "pid", "args"),
    "M": ("name", "pid", "args"),
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _event_problems(index: int, event: Any) -> list[str]:
    where = f"event {index}"
    if not isinstance(event, dict):
        return [f"{where} is not an object"]
    ph = event.get("ph")
    if ph not in REQUIRED:
        return [f"{where}: ph {ph!r} is not one of {', '.join(REQUIRED)}"]
    problems = [f"{where} ({ph}): missing {key!r}" for key in REQUIRED[ph] if key not in event]
    if problems:
        return problems
    if not isinstance(event["name"], str) or not event["name"]:
        problems.append(f"{where}: name must be a non-empty string")
    for key in ("pid", "tid"):
        if key in event and (not isinstance(event[key], int) or isinstance(event[key], bool)):
            problems.append(f"{where}: {key} must be an integer")
    if "ts" in event and not _number(event["ts"]):
        problems.append(f"{where}: ts must be a number of microseconds")
    if "args" in event and not isinstance(event["args"], dict):
        problems.append(f"{where}: args must be an object")
        return problems
    if ph == "X" and not (_number(event["dur"]) and event["dur"] >= 0):
        problems.append(f"{where}: dur must be a non-negative number")
    numeric = all(_number(v) for v in event["args"].values()) if "args" in event else False
    if ph == "C" and not (event["args"] and numeric):
        problems.append(f"{where}: counter args must be non-empty and all numeric")
    if ph == "M":
        key = METADATA_ARGS.get(event["name"])
        if key is None:
            problems.append(f"{where}: unknown metadata name {event['name']!r}")
        elif key not in event["args"]:
            problems.append(f"{where}: metadata {event['name']} needs args.{key}")
        elif "tid" not in event and event["name"].startswith("thread_"):
            problems.append(f"{where}: thread metadata needs a tid")
    return problems


def _nesting_problems(events: list[dict[str, Any]]) -> list[str]:
    by_thread: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("ph") == "X":
            key = (e["pid"], e["tid"])
            by_thread.setdefault(key, []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    problems = []
    for (pid, tid), slices in by_thread.items():
        stack: list[tuple[float, float, str]] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(
                    f"pid {pid} tid {tid}: slice {name!r} overlaps {stack[-1][2]!r} partially"
                )
            stack.append((start, end, name))
    return problems


def validate(doc: Any) -> list[str]:
    """Every problem found, as one line each; an empty list means the trace is valid."""
    if isinstance(doc, list):
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
        unit = doc.get("displayTimeUnit", "ms")
        if unit not in ("ms", "ns"):
            return [f"displayTimeUnit must be 'ms' or 'ns', got {unit!r}"]
    else:
        return ["a trace is a list of events or an object with a traceEvents list"]
    problems = [p for i, e in enumerate(events) for p in _event_problems(i, e)]
    return problems or _nesting_problems(events)
