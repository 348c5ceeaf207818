"""One row of any verb: a configuration measured in a worker, then judged by the parent.

``run``, each ``compare`` row, the pytest plugin and ``repro`` all come through here: the
worker records facts, the parent applies the verdict rules (``core.verdicts``) to the
record and to how the worker ended, and the row carries both. A worker that ended without
a usable record still gives a row: its failure, with the environment around it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from offloadprobe.core import environment
from offloadprobe.core.budgets import Breach, Budget
from offloadprobe.core.config import RunConfig
from offloadprobe.core.job import Job, LaunchSpec
from offloadprobe.core.outcomes import Failure, Verdict
from offloadprobe.core.records import Report, RunRecord, report_from_dict
from offloadprobe.core.streamed import ending
from offloadprobe.core.verdicts import judge
from offloadprobe.isolation.supervisor import WorkerOutcome, WorkerSpec, run_worker
from offloadprobe.isolation.warden import held_against


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """A configuration, how its worker ended, its record and its verdict."""

    label: str
    config: RunConfig
    outcome: WorkerOutcome
    report: Report
    """The worker's report, or one around a row that carries only the failure."""
    verdict: Verdict
    breaches: list[Breach] = field(default_factory=list)

    @property
    def run(self) -> RunRecord | None:
        return self.report.runs[0] if self.report.runs else None

    @property
    def ok(self) -> bool:
        return self.verdict.ok


def failed_report(
    cfg: RunConfig, failure: Failure, *, device: str, phases: Sequence[dict[str, Any]] = ()
) -> Report:
    """A report with one row that says how and where it failed, with every phase its worker
    recorded before it ended."""
    from offloadprobe.core.records import PhaseRecord, build_record

    recorded = [build_record(PhaseRecord, p) for p in phases]
    offloads = [p for p in recorded if p.phase.startswith("offload")]
    row = RunRecord(
        strategy=cfg.strategy,
        description="",
        payload_bytes=max((p.bytes_moved for p in offloads), default=0),
        grad_bytes=0,
        baseline_host_bytes=offloads[0].host.host_rss_before if offloads else 0,
        gpu_baseline_bytes=None,
        phases=recorded,
        summary=None,
        failure=failure,
        optimizer_strategy=cfg.optimizer_strategy,
        label_override=cfg.label,
    )
    return Report(
        device=device,
        emulated=device == "cpu",
        emulation_note=None,
        payload_bytes=0,
        versions=environment.versions(),
        machine=environment.machine(),
        model=asdict(cfg.model),
        settings={
            "strategy": cfg.strategy,
            "optimizer_strategy": cfg.optimizer_strategy,
            "cycles": cfg.cycles,
        },
        runs=[row],
    )


def measure(
    cfg: RunConfig,
    *,
    device: str,
    budgets: Sequence[Budget] = (),
    nproc_per_node: int = 1,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    launch: LaunchSpec | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    cgroup: Any = None,
    node_cgroup: str | None = None,
    node_cgroup_missing: str | None = None,
    on_phase: Callable[[dict[str, Any]], None] | None = None,
    on_started: Callable[[Job], Any] | None = None,
    timeline: bool = False,
    gate: bool = False,
    amend: Callable[[Report], Report] | None = None,
) -> Row:
    """Run ``cfg`` in a fresh worker; the judged row. With ``nproc_per_node`` or ``nnodes``
    above 1 the worker is torchrun's launcher, and it and every rank run in a new node
    memory cgroup (unless ``cgroup`` is given: the caller's, which it removes itself).
    ``amend`` adds what the parent measured to the report before it is judged (the host
    limit it held)."""
    import contextlib
    import os

    from offloadprobe.engine.runtime.eager import set_here
    from offloadprobe.isolation.node import node_group, run_id_for

    if launch is None and (nproc_per_node > 1 or nnodes > 1):
        launch = LaunchSpec(
            nproc_per_node=nproc_per_node,
            nnodes=nnodes,
            rdzv_endpoint=rdzv_endpoint,
            run_id=run_id_for(rdzv_endpoint if nnodes > 1 else None),
        )
    made = None
    if launch is not None and cgroup is None:
        made, node_cgroup_missing = node_group(launch.run_id)
        cgroup, node_cgroup = made, str(made.path) if made is not None else None

    job = Job(
        config=cfg,
        workdir="",
        launch=launch,
        timeline=timeline,
        gate=gate,
        node_cgroup=node_cgroup,
        node_cgroup_missing=node_cgroup_missing,
        dynamo_disabled_by_user="TORCHDYNAMO_DISABLE" in os.environ and not set_here(),
    )
    spec = WorkerSpec(
        job=job,
        env=dict(env or {}),
        timeout_s=timeout_s,
        cgroup=cgroup,
        on_phase=on_phase,
        on_started=on_started,
    )
    try:
        outcome = run_worker(spec)
    finally:
        if made is not None:
            with contextlib.suppress(OSError):
                made.kill()
                made.remove()
    return judge_outcome(cfg, outcome, budgets, device=device, amend=amend)


def judge_outcome(
    cfg: RunConfig,
    outcome: WorkerOutcome,
    budgets: Sequence[Budget],
    *,
    device: str,
    amend: Callable[[Report], Report] | None = None,
) -> Row:
    """The row of a finished worker: its report (or a failed one), ``amend``-ed, judged."""
    report = None
    breaches: list[Breach]
    if outcome.report is not None:
        try:
            report = report_from_dict(outcome.report)
        except (KeyError, TypeError, ValueError) as exc:
            failure = Failure(kind="inconsistent", message=f"unreadable record ({exc})")
            outcome = replace(outcome, failure=failure)
    if outcome.streamed is not None:  # what the parent was told and read: the last word
        run = report.runs[0] if report is not None and report.runs else None
        if report is not None and run is not None:
            run = held_against(run, outcome.streamed)
            report = replace(report, runs=[run, *report.runs[1:]])
        outcome = replace(outcome, failure=ending(run, outcome.streamed, outcome.failure))
    if report is None or not report.runs:
        failure = outcome.failure or Failure(kind="crashed", message="no record was produced")
        report = failed_report(cfg, failure, device=device, phases=outcome.phases)
        if amend is not None:
            report = amend(report)
        verdict, breaches = failure.verdict, []
    else:
        if amend is not None:
            report = amend(report)
        run = report.runs[0]
        if outcome.failure is not None and run.failure != outcome.failure:
            # how the worker ended, as the parent saw it, is a fact of the record: a saved
            # record is judged again (``show``) to the verdict it was given here
            report = replace(report, runs=[replace(run, failure=outcome.failure), *report.runs[1:]])
        verdict, breaches = judge(report.runs[0], list(budgets), failure=outcome.failure)
    report = replace(report, verdicts=[verdict])
    label = cfg.label or report.runs[0].label
    return Row(
        label=label, config=cfg, outcome=outcome, report=report, verdict=verdict, breaches=breaches
    )
