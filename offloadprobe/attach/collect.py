"""Read the job's stream files into one typed ``JobRecord``.

A stream file holds one or more processes (a pid reused on one host appends after a new
``started`` record). A torn last line (a process killed while writing) is skipped and
said in the notes. Summaries are made here, from the calls, never measured again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from offloadprobe.attach import protocol
from offloadprobe.attach.images import Image
from offloadprobe.attach.meter import GroupReading, Ledger
from offloadprobe.attach.records import (
    CALLED,
    MODULE_NEVER_IMPORTED,
    NEVER_CALLED,
    NOT_WRAPPED,
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
from offloadprobe.attach.spec import PhaseSpec
from offloadprobe.attach.tree import Seen


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeMemory:
    """The job's memory as the parent measured it on its own host."""

    host: str
    peak_bytes: int | None
    method: str


@dataclass(kw_only=True, slots=True)
class _Stream:
    processes: list[Process]
    calls: list[Call]
    wrapped: set[str]
    skipped: dict[str, str]
    torn: int


def read_streams(out_dir: Path) -> _Stream:
    """Every record of every stream file in ``out_dir``."""
    result = _Stream(processes=[], calls=[], wrapped=set(), skipped={}, torn=0)
    for path in sorted(out_dir.glob(f"{protocol.STREAM_PREFIX}*{protocol.STREAM_SUFFIX}")):
        _read_file(path, result)
    return result


def _read_file(path: Path, into: _Stream) -> None:
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            into.processes.append(_process(current))

    for line in path.read_bytes().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            into.torn += 1
            continue
        kind = doc.get("kind")
        if kind == protocol.STARTED:
            close()
            current = {**doc, "calls": 0, "wrapped": [], "skipped": [], "exited": False}
            continue
        if current is None:
            continue
        if kind == protocol.CALL:
            into.calls.append(Call.from_stream(doc))
            current["calls"] += 1
        elif kind == protocol.WRAPPED:
            into.wrapped.add(doc["phase"])
            current["wrapped"].append(doc["phase"])
        elif kind == protocol.SKIPPED:
            into.skipped.setdefault(doc["phase"], doc.get("reason", "?"))
            current["skipped"].append((doc["phase"], doc.get("reason", "?")))
        elif kind == protocol.EXIT:
            current["exited"] = True
    close()


def _process(doc: dict[str, Any]) -> Process:
    return Process(
        pid=int(doc["pid"]),
        ppid=doc.get("ppid"),
        host=str(doc.get("host", "?")),
        how=str(doc.get("how", "?")),
        argv=tuple(doc.get("argv") or ()),
        rank=doc.get("rank"),
        local_rank=doc.get("local_rank"),
        started=float(doc.get("time", 0.0)),
        exited=bool(doc["exited"]),
        calls=int(doc["calls"]),
        wrapped=tuple(doc["wrapped"]),
        skipped=tuple(doc["skipped"]),
    )


def _max(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _worst(calls: Sequence[Call]) -> Call | None:
    return max(calls, key=lambda c: c.host_peak_bytes) if calls else None


def summarise_phase(
    name: str, target: str, preset: str | None, calls: list[Call], status: str
) -> PhaseSummary:
    last = max(calls, key=lambda c: c.start_time + c.seconds) if calls else None
    return PhaseSummary(
        name=name,
        target=target,
        preset=preset,
        status=status,
        calls=len(calls),
        raised=sum(c.raised for c in calls),
        worst=_worst(calls),
        host_after_max_bytes=_max(c.host_after_bytes for c in calls),
        pinned_after_max_bytes=_max(c.pinned_after_bytes for c in calls),
        gpu_left_max_bytes=_max(c.gpu_allocated_after_bytes for c in calls),
        node_peak_bytes=last.node_peak_after_bytes if last is not None else None,
        seconds_total=sum(c.seconds for c in calls),
    )


def _phases(
    specs: Sequence[PhaseSpec], streams: _Stream, calls: Sequence[Call]
) -> list[PhaseSummary]:
    by_phase: dict[str, list[Call]] = {}
    for call in calls:
        by_phase.setdefault(call.phase, []).append(call)
    out = []
    for spec in specs:
        calls = by_phase.pop(spec.name, [])
        if calls:
            status = CALLED
        elif spec.name in streams.wrapped:
            status = NEVER_CALLED
        elif spec.name in streams.skipped:
            status = NOT_WRAPPED + streams.skipped[spec.name]
        else:
            status = MODULE_NEVER_IMPORTED
        out.append(summarise_phase(spec.name, spec.target, spec.preset, calls, status))
    for name, calls in by_phase.items():  # offloadprobe.phase() blocks
        out.append(summarise_phase(name, calls[0].target, None, calls, CALLED))
    return out


def _by_rank(calls: Iterable[Call]) -> dict[tuple[str, int, int], list[Call]]:
    """Calls grouped by host and rank, or by host and pid where a call has no rank; in
    the order given within each group."""
    groups: dict[tuple[str, int, int], list[Call]] = {}
    for call in calls:
        key = (call.host, 0, call.rank) if call.rank is not None else (call.host, 1, call.pid)
        groups.setdefault(key, []).append(call)
    return groups


def _span(first: int | None, last: int | None) -> int | None:
    return None if first is None or last is None else last - first


def _host_span(first: Call, last: Call) -> int:
    """Host after the last call less after the first: the larger of the RSS view and
    (for calls of one process: one cgroup) the cgroup view."""
    rss = last.host_after_bytes - first.host_after_bytes
    group = _span(first.group_after_bytes, last.group_after_bytes)
    return rss if group is None or first.pid != last.pid else max(rss, group)


def summarise_growth(calls: Sequence[Call]) -> list[PhaseGrowth]:
    """Per phase (in order of first call) and rank: the figures after the last call less
    after the first, calls taken in the order they started."""
    phases: dict[str, list[Call]] = {}
    for call in sorted(calls, key=lambda c: (c.start_time, c.pid)):
        phases.setdefault(call.phase, []).append(call)
    out = []
    for phase, mine in phases.items():
        for (host, _, _), group in sorted(_by_rank(mine).items()):
            first, last = group[0], group[-1]
            several = len(group) > 1
            out.append(
                PhaseGrowth(
                    phase=phase,
                    rank=first.rank,
                    host=host,
                    pids=tuple(sorted({c.pid for c in group})),
                    calls=len(group),
                    host_growth_bytes=_host_span(first, last) if several else None,
                    pinned_growth_bytes=(
                        _span(first.pinned_after_bytes, last.pinned_after_bytes)
                        if several
                        else None
                    ),
                )
            )
    return out


def summarise_ranks(calls: Sequence[Call]) -> list[RankSummary]:
    groups = _by_rank(calls)
    return [
        RankSummary(
            rank=group[0].rank,
            host=host,
            pids=tuple(sorted({c.pid for c in group})),
            calls=len(group),
            worst=_worst(group),
            host_after_max_bytes=_max(c.host_after_bytes for c in group),
            pinned_after_max_bytes=_max(c.pinned_after_bytes for c in group),
            gpu_left_max_bytes=_max(c.gpu_allocated_after_bytes for c in group),
        )
        for (host, _, _), group in sorted(groups.items())
    ]


def summarise_nodes(
    processes: Sequence[Process], calls: Sequence[Call], memory: NodeMemory | None
) -> list[NodeSummary]:
    hosts = sorted({p.host for p in processes} | {c.host for c in calls})
    if memory is not None and memory.host not in hosts:
        hosts.append(memory.host)
    out = []
    for host in hosts:
        mine = memory is not None and memory.host == host
        here = [c for c in calls if c.host == host]
        out.append(
            NodeSummary(
                host=host,
                processes=sum(p.host == host for p in processes),
                calls=len(here),
                worst=_worst(here),
                node_peak_bytes=memory.peak_bytes if mine else None,
                node_peak_method=memory.method if mine else "not measured (another host)",
            )
        )
    return out


def _uninstrumented(
    seen: Iterable[Seen],
    processes: Sequence[Process],
    host: str,
    images: Mapping[int, Sequence[Image | None]],
) -> tuple[list[Uninstrumented], int]:
    """Python images of the tree that never said hello to the parent; and how many were
    seen only as a copy of an instrumented image between fork and exec (what they became
    is unknown: not listed, counted in a note).

    An image is known by its token (``images.py``): one that said hello from its pid is
    instrumented; the same token under another pid is a forked copy of it. Where a token
    could not be read, or a process wrote a stream but never reached the parent, the pid
    stands in (the old rule)."""
    streams = {p.pid for p in processes if p.host == host}
    registered = {pid: {i.token for i in found if i is not None} for pid, found in images.items()}
    every = set().union(*registered.values()) if registered else set()
    seen = [s for s in seen if s.python]
    unregistered = {s.image: s.pid for s in seen if s.image is not None and s.image not in every}
    out, unresolved = [], 0
    for s in sorted(seen, key=lambda s: (s.pid, s.image or "")):
        mine = registered.get(s.pid)
        if s.image is None or (mine is None and s.pid in streams):
            if s.pid in streams or mine is not None:  # the pid stands in
                continue
        elif s.image in (mine or ()):
            continue
        elif s.image in every:  # a forked copy of an instrumented image
            if mine is None:
                unresolved += 1
            continue
        elif unregistered.get(s.image, s.pid) != s.pid:
            continue  # a forked copy of an uninstrumented image: that one is listed
        out.append(
            Uninstrumented(
                pid=s.pid,
                ppid=s.ppid,
                command=s.command,
                seen_by=s.seen_by,
                after_exec=mine is not None,
            )
        )
    return out, unresolved


def _with_readings(
    calls: Sequence[Call], host: str, readings: Mapping[tuple[int, str, int], GroupReading]
) -> tuple[list[Call], list[Call]]:
    """The calls with the parent's cgroup readings put in; and those of this host that
    have none (the parent was not reached)."""
    out, missing = [], []
    for call in calls:
        reading = readings.get((call.pid, call.phase, call.index)) if call.host == host else None
        if reading is None:
            out.append(call)
            if call.host == host:
                missing.append(call)
            continue
        out.append(
            replace(
                call,
                group_before_bytes=reading.before,
                group_after_bytes=reading.after,
                group_peak_bytes=reading.peak,
                node_usage_after_bytes=reading.node_usage,
                node_peak_after_bytes=reading.node_peak,
            )
        )
    return out, missing


def _notes(
    streams: _Stream,
    missing: Sequence[Call],
    uninstrumented: Sequence[Uninstrumented],
    unresolved: int,
    require_calls: bool,
) -> list[str]:
    notes = []
    if missing:
        pids = ", ".join(str(pid) for pid in sorted({c.pid for c in missing})[:8])
        notes.append(
            f"{len(missing)} call(s) have no cgroup reading by attach (pid {pids}: the "
            "process never reached attach, or was given no cgroup of its own): their host "
            "figures are their RSS alone"
        )
    if streams.torn:
        notes.append(f"{streams.torn} torn record line(s) skipped (a process killed while writing)")
    execs = {u.pid for u in uninstrumented if u.after_exec}
    unfinished = {p.pid for p in streams.processes if not p.exited} - execs
    if unfinished:
        pids = ", ".join(str(pid) for pid in sorted(unfinished)[:8])
        notes.append(
            f"{len(unfinished)} instrumented process(es) wrote no exit record (killed, or "
            f"ended by os._exit, as multiprocessing's forked children are): pid {pids}; "
            "their calls up to then are all here"
        )
    if execs:
        notes.append(
            f"{len(execs)} process(es) executed a new image without the bootstrap after an "
            f"instrumented one (pid {', '.join(str(p) for p in sorted(execs)[:8])}): what "
            "they did after that is in no record"
            + ("" if require_calls else "; --require-calls makes this exit 1")
        )
    if unresolved:
        notes.append(
            f"{unresolved} child process(es) seen only between fork and exec, as copies "
            "of an instrumented parent: gone before they could be told apart"
        )
    return notes


def collect(
    *,
    command: Sequence[str],
    exit_code: int,
    seconds: float,
    out_dir: Path,
    specs: Sequence[PhaseSpec],
    seen: Iterable[Seen],
    host: str,
    memory: NodeMemory | None,
    notes: Sequence[str] = (),
    require_calls: bool = False,
    ledger: Ledger | None = None,
    grouped: bool = False,
    escaped: Sequence[Escaped] = (),
    peak_resets: Sequence[str] = (),
) -> JobRecord:
    """The job's record from its streams and the parent's own observations: the tree it
    polled, the ledger of its meter (``grouped``: every process had a cgroup to read),
    the processes found outside their cgroup, the peaks reset behind its back."""
    streams = read_streams(out_dir)
    ledger = ledger if ledger is not None else Ledger()
    calls, missing = _with_readings(
        sorted(streams.calls, key=lambda c: (c.start_time, c.pid)), host, ledger.readings
    )
    uninstrumented, unresolved = _uninstrumented(seen, streams.processes, host, ledger.images)
    all_notes = list(notes) + _notes(
        streams, missing if grouped else [], uninstrumented, unresolved, require_calls
    )
    return JobRecord(
        command=tuple(command),
        exit_code=exit_code,
        seconds=seconds,
        out_dir=str(out_dir),
        calls=tuple(calls),
        phases=tuple(_phases(specs, streams, calls)),
        ranks=tuple(summarise_ranks(calls)),
        nodes=tuple(summarise_nodes(streams.processes, calls, memory)),
        processes=tuple(streams.processes),
        uninstrumented=tuple(uninstrumented),
        growth=tuple(summarise_growth(calls)),
        notes=tuple(all_notes),
        require_calls=require_calls,
        escaped=tuple(escaped),
        peak_resets=tuple(sorted(set(peak_resets))),
    )
