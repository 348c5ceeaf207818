"""Host-limit reproduction: each model strategy in a fresh child under a real memory cgroup.

The child (a worker whose job has ``gate`` set) runs in a cgroup created for it, with no
limit while it imports, builds and trains. At the start of its first offload it stops;
the parent drops the group's page cache no process maps, reads the group's usage then
(the child's whole pre-offload footprint: interpreter, torch, megatron, model, emulated
device buffers) and sets::

    limit = usage at the gate + scaled host limit

so the scaled budget applies exactly to what the strategy adds over its pre-offload
baseline (``repro/window.py``). The child continues; if it crosses the limit the kernel
OOM-kills it, which the group's ``oom_kill`` counter confirms and the phase log places in
a cycle and phase. A child the kernel let through by reclaiming page cache instead, whose
measured host peak still tops the scaled limit, is an OOM too (``over the limit, not
killed``); the margin of one within it is the scaled limit less that host peak, and the
page cache reclaimed under the limit is said beside it.

Where no cgroup can be made, the child runs unlimited and its exact per-phase VmHWM
(over the same baseline) is compared with the scaled limit instead, and the output says
so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from offloadprobe.core.config import RunConfig
from offloadprobe.core.job import LaunchSpec
from offloadprobe.core.limits import HostLimitRecord
from offloadprobe.core.records import Report, RunRecord
from offloadprobe.core.units import format_bytes
from offloadprobe.core.verdicts import LIMITED, over_limit
from offloadprobe.isolation.node import run_id_for
from offloadprobe.layout.terms import Term
from offloadprobe.measure.cgroup import CgroupUnavailable, MemoryGroup, create_group
from offloadprobe.repro.children import Child, GateKeeper, run_child
from offloadprobe.repro.records import ReproOutcome
from offloadprobe.repro.window import LimitWindow

__all__ = ["HostJob", "LimitWindow", "over_limit", "run_host_job"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HostJob:
    """One strategy to run under the scaled host limit."""

    strategy: str
    expected: str
    config: RunConfig
    """The shared child configuration; the job's strategy is set on it."""
    """``offloadprobe run`` flags (model, device, cycles...) without the strategy."""
    limit: int
    """Scaled host limit: bytes the child may add over its pre-offload usage (the node's,
    with several ranks)."""
    timeout_s: float | None = None
    ranks: int = 1
    """Ranks the child starts in the group (a node-level repro)."""
    device: str = "cpu"


def run_host_job(job: HostJob, workdir: Path, *, use_cgroup: bool = True) -> ReproOutcome:
    """Run ``job`` in a limited cgroup where one can be made, else judge from VmHWM."""
    if use_cgroup:
        name = f"offloadprobe-{os.getpid()}-{job.strategy}"
        try:
            group = create_group(name)
        except CgroupUnavailable as why:
            return _judged(job, workdir, reason=str(why))
        try:
            return _limited(job, workdir, group)
        finally:
            group.kill()  # ranks a timed-out launcher left behind live on in the group
            group.remove()
    return _judged(job, workdir, reason="cgroup limit not requested")


def _child(job: HostJob, **extra: object) -> Child:
    config = replace(job.config, strategy=job.strategy)
    launch = None
    if job.ranks > 1:
        launch = LaunchSpec(nproc_per_node=job.ranks, run_id=run_id_for(None))
    return run_child(config, device=job.device, timeout_s=job.timeout_s, launch=launch, **extra)  # type: ignore[arg-type]


def _limited(job: HostJob, workdir: Path, group: MemoryGroup) -> ReproOutcome:
    window = LimitWindow(group, job.limit)
    keepers: list[GateKeeper] = []

    def amend(report: Report) -> Report:
        window.finish()
        errors = [e for k in keepers for e in k.errors]
        runs = [replace(r, host_limit=window.record(errors, r.phases)) for r in report.runs]
        return replace(report, runs=runs)

    # the ranks' launcher runs them in this group, not one of its own
    node = str(group.path) if job.ranks > 1 else None
    outcome = _child(job, gate=window, keepers=keepers, cgroup=group, node_cgroup=node, amend=amend)
    keeper_errors = [e for k in keepers for e in k.errors]
    base = dict(
        strategy=job.strategy,
        kind="params",
        expected=job.expected,
        method=f"real limit: {group.mechanism}, held from each offload to the end of its "
        "load, page cache no process maps dropped before each",
        exit_code=outcome.exit_code,
        child_verdict=outcome.verdict,
        stderr_tail=outcome.stderr_tail,
    )
    if window.limit is None or keeper_errors:
        why = "; ".join(keeper_errors) or "it never reached its first offload"
        return ReproOutcome(
            observed="error", detail=f"limit not set: {why} ({outcome.verdict})", **base
        )
    row_run = outcome.row.run
    record = (row_run.host_limit if row_run is not None else None) or window.record()
    terms = _window_terms(window, job, record)
    reclaim = f"; {record.reclaim_words()} under the limit" if record.reclaimed_bytes else ""
    kills = group.oom_kills()
    if outcome.exit_code == -9:
        cycle, phase = outcome.killed_at
        if kills:
            where = f"cycle {cycle}, phase {phase}" if phase else "between phases"
            return ReproOutcome(
                observed="oom",
                detail=f"OOM reproduced: killed at {where} (cgroup oom_kill 0 -> {kills})"
                + reclaim,
                cycle=cycle,
                phase=phase,
                terms=tuple(terms),
                **base,
            )
        return ReproOutcome(
            observed="error",
            detail=f"killed by SIGKILL at cycle {cycle}, phase {phase}, but the cgroup "
            "recorded no OOM kill",
            terms=tuple(terms),
            **base,
        )
    run = outcome.run
    failure = run.failure if run is not None else outcome.row.outcome.failure
    if job.ranks > 1 and failure is not None and failure.kind == "killed":
        where = f"cycle {failure.cycle}, phase {failure.phase}"
        if kills:
            return ReproOutcome(
                observed="oom",
                detail=f"OOM reproduced at node level: {failure.text}{reclaim}",
                cycle=failure.cycle,
                phase=failure.phase,
                terms=tuple(terms),
                **base,
            )
        return ReproOutcome(
            observed="error",
            detail=f"a rank was killed at {where}, but the cgroup recorded no OOM kill",
            terms=tuple(terms),
            **base,
        )
    verdict = outcome.row.verdict
    if verdict.kind == "over limit":
        return ReproOutcome(
            observed="oom",
            detail=f"OOM: over the limit at {verdict.where}: {verdict.detail}",
            cycle=verdict.cycle,
            phase=verdict.phase,
            terms=tuple(terms),
            **base,
        )
    if outcome.exit_code != 0 or run is None or run.summary is None:
        return ReproOutcome(observed="error", detail=outcome.verdict, terms=tuple(terms), **base)
    node = run.world.nodes[0] if run.world is not None and run.world.nodes else None
    if job.ranks > 1 and node is not None and node.peak_bytes is not None:
        margin = job.limit - node.peak_bytes
        terms.append(
            Term(
                label="node peak in offload/load phases",
                formula="node cgroup peak over its usage at the first offload",
                value=node.peak_bytes,
            )
        )
        terms.append(Term(label="margin", formula="scaled node limit - node peak", value=margin))
        return ReproOutcome(
            observed="ok",
            detail=f"within the node limit, margin {format_bytes(margin)} (node cgroup peak "
            f"{format_bytes(node.peak_bytes)} of {format_bytes(job.limit)}){reclaim}",
            margin=margin,
            terms=tuple(terms),
            node=node,
            **base,
        )
    peak = max(
        (p.host.host_peak - run.baseline_host_bytes for p in run.phases if p.phase in LIMITED),
        default=run.summary.host_peak_bytes,
    )
    margin = job.limit - peak
    terms.append(
        Term(
            label="host peak in offload/load phases",
            formula="measured host peak over the host at the first offload",
            value=peak,
        )
    )
    terms.append(Term(label="margin", formula="scaled host limit - host peak", value=margin))
    return ReproOutcome(
        observed="ok",
        detail=f"within limit, margin {format_bytes(margin)} (host peak {format_bytes(peak)} "
        f"over the first offload's, of {format_bytes(job.limit)}){reclaim}",
        margin=margin,
        terms=tuple(terms),
        **base,
    )


def _window_terms(window: LimitWindow, job: HostJob, record: HostLimitRecord) -> list[Term]:
    """The limit's arithmetic, and the page cache dropped before it and reclaimed under it."""
    terms = [
        Term(
            label="cgroup usage at the first offload",
            formula="the child's pre-offload baseline, after the drop",
            value=window.baseline,
        ),
        Term(label="scaled host limit", formula="see the scaling above", value=job.limit),
        Term(label="cgroup limit", formula=" and ".join(window.written), value=window.limit),
        Term(
            label="page cache dropped",
            formula="unmapped page cache reclaimed before each limit was set",
            value=record.dropped_bytes,
        ),
    ]
    if record.reclaimed_bytes:
        how = "memory.stat pgsteal" if record.reclaim_exact else "page cache fall, at least"
        terms.append(
            Term(label="reclaimed under the limit", formula=how, value=record.reclaimed_bytes)
        )
    return terms


def _judged(job: HostJob, workdir: Path, *, reason: str) -> ReproOutcome:
    outcome = _child(job)
    method = f"judged from the exact VmHWM, no real limit ({reason})"
    base = dict(
        strategy=job.strategy,
        kind="params",
        expected=job.expected,
        method=method,
        exit_code=outcome.exit_code,
        child_verdict=outcome.verdict,
        stderr_tail=outcome.stderr_tail,
    )
    run = outcome.run
    if outcome.exit_code != 0 or run is None or run.summary is None:
        return ReproOutcome(observed="error", detail=outcome.verdict, **base)
    terms = [
        Term(label="scaled host limit", formula="see the scaling above", value=job.limit),
        Term(
            label="host peak over the baseline",
            formula="summary.host_peak_bytes (VmHWM)",
            value=run.summary.host_peak_bytes,
        ),
    ]
    if job.ranks > 1:
        return _judged_node(job, run, terms, base)
    hit = over_limit(run, job.limit)
    if hit is not None:
        cycle, phase, over = hit
        return ReproOutcome(
            observed="oom",
            detail=f"OOM (judged): would be killed at cycle {cycle}, phase {phase} "
            f"({format_bytes(over)} > {format_bytes(job.limit)})",
            cycle=cycle,
            phase=phase,
            terms=tuple(terms),
            **base,
        )
    margin = job.limit - run.summary.host_peak_bytes
    return ReproOutcome(
        observed="ok",
        detail=f"within limit, margin {format_bytes(margin)} (judged)",
        margin=margin,
        terms=tuple(terms),
        **base,
    )


def _judged_node(job: HostJob, run: RunRecord, terms: list[Term], base: dict) -> ReproOutcome:
    """Several ranks and no limit to enforce: the node's measured peak against the node
    limit, or where the node has no cgroup, the sum of its ranks' peaks (every rank
    peaking at once: an upper bound, and said so)."""
    node = run.world.nodes[0] if run.world is not None and run.world.nodes else None
    if node is None or (node.peak_bytes is None and node.rank_peak_sum_bytes is None):
        return ReproOutcome(observed="error", detail="no node figure to judge", **base)
    if node.peak_bytes is not None:
        figure, how = node.peak_bytes, "node cgroup peak"
    else:
        figure, how = node.rank_peak_sum_bytes, "sum of the ranks' VmHWM peaks (upper bound)"
    terms.append(Term(label="node peak over the baseline", formula=how, value=figure))
    if figure > job.limit:
        return ReproOutcome(
            observed="oom",
            detail=f"OOM (judged): {how} {format_bytes(figure)} > {format_bytes(job.limit)}",
            terms=tuple(terms),
            node=node,
            **base,
        )
    return ReproOutcome(
        observed="ok",
        detail=f"within the node limit, margin {format_bytes(job.limit - figure)} (judged, {how})",
        margin=job.limit - figure,
        terms=tuple(terms),
        node=node,
        **base,
    )
