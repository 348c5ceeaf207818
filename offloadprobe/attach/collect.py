"""Read the job's stream files into one typed ``JobRecord``.

A stream file holds one or more processes (a pid reused on one host appends after a new
``started`` record). A torn last line (a process killed while writing) is skipped and
said in the notes. Summaries are made here, from the calls, never measured again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.attach import protocol
from offloadprobe.attach.records import (
    CALLED,
    MODULE_NEVER_IMPORTED,
    NEVER_CALLED,
    NOT_WRAPPED,
    Call,
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


def _phases(specs: Sequence[PhaseSpec], streams: _Stream) -> list[PhaseSummary]:
    by_phase: dict[str, list[Call]] = {}
    for call in streams.calls:
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
                    host_growth_bytes=(
                        last.host_after_bytes - first.host_after_bytes if several else None
                    ),
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
    seen: Iterable[Seen], processes: Sequence[Process], host: str
) -> tuple[list[Uninstrumented], int]:
    """Python processes of the tree with no stream; and how many were seen only as a
    copy of an instrumented parent between fork and exec (what they became is unknown:
    not listed, counted in a note)."""
    mine = {p.pid for p in processes if p.host == host}
    by_pid = {s.pid: s for s in seen}
    out, unresolved = [], 0
    for s in sorted(by_pid.values(), key=lambda s: s.pid):
        if not s.python or s.pid in mine:
            continue
        parent = by_pid.get(s.ppid) if s.ppid is not None else None
        if s.ppid in mine and parent is not None and parent.command == s.command:
            unresolved += 1
            continue
        out.append(Uninstrumented(pid=s.pid, ppid=s.ppid, command=s.command, seen_by=s.seen_by))
    return out, unresolved


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
) -> JobRecord:
    """The job's record from its streams and the parent's own observations."""
    streams = read_streams(out_dir)
    calls = sorted(streams.calls, key=lambda c: (c.start_time, c.pid))
    all_notes = list(notes)
    if streams.torn:
        all_notes.append(
            f"{streams.torn} torn record line(s) skipped (a process killed while writing)"
        )
    unfinished = [p for p in streams.processes if not p.exited]
    if unfinished:
        pids = ", ".join(str(pid) for pid in sorted({p.pid for p in unfinished})[:8])
        all_notes.append(
            f"{len(unfinished)} instrumented process(es) wrote no exit record (killed, or "
            f"ended by os._exit, as multiprocessing's forked children are): pid {pids}; "
            "their calls up to then are all here"
        )
    uninstrumented, unresolved = _uninstrumented(seen, streams.processes, host)
    if unresolved:
        all_notes.append(
            f"{unresolved} child process(es) seen only between fork and exec, as copies "
            "of an instrumented parent: gone before they could be told apart"
        )
    return JobRecord(
        command=tuple(command),
        exit_code=exit_code,
        seconds=seconds,
        out_dir=str(out_dir),
        calls=tuple(calls),
        phases=tuple(_phases(specs, streams)),
        ranks=tuple(summarise_ranks(calls)),
        nodes=tuple(summarise_nodes(streams.processes, calls, memory)),
        processes=tuple(streams.processes),
        uninstrumented=tuple(uninstrumented),
        growth=tuple(summarise_growth(calls)),
        notes=tuple(all_notes),
        require_calls=require_calls,
    )
