"""The measured process: ``python -m offloadprobe.engine.worker JOB.json``.

A parent (``isolation.supervisor``) writes the job and starts this process; it reads the
job, runs what it says, and writes one ``WorkerResult`` (``core.job``) before it exits.
The job says which of three things it is:

- one process: the cycles, in this process;
- the launcher of several ranks: torchrun's own launcher (``engine.world.launch``), each
  rank a worker of the same job;
- one rank our launcher (or the user's torchrun, through ``offloadprobe run``) started:
  this rank's share, rank 0 writing the world's report.

The worker's exit code is the one its result records: 0 when the run's facts pass every
rule but budgets (those are the parent's), 1 when they do not, 2 for bad input. The parent
checks the two agree. Where the job names a channel (one process), the worker connects to
its parent before any strategy code is imported and tells it, as they happen, each phase's
start and end, each integrity problem and its result (``engine.channel``): what the
parent judges, whatever the record file or the exit status say later.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from offloadprobe.core import collector
from offloadprobe.core.errors import OffloadProbeError, UsageError
from offloadprobe.core.job import Job, WorkerResult
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import Report, report_from_dict
from offloadprobe.core.verdicts import judge
from offloadprobe.core.world import under_torchrun
from offloadprobe.engine.channel import ParentChannel
from offloadprobe.measure.phase_log import PhaseLog


def _exit_code(report: Report | None, failure: Failure | None) -> int:
    if failure is not None:
        return 2 if failure.kind == "bad input" else 1
    if report is None:
        return 0  # a rank other than 0: rank 0 reports for every rank
    codes = [judge(run)[0].exit_code for run in report.runs]
    return max(codes, default=1)


def _rank() -> int | None:
    return int(os.environ.get("RANK", "0")) if under_torchrun() else None


def _single(job: Job, channel: ParentChannel | None = None) -> Report:
    from offloadprobe.engine.runner import Hooks, run
    from offloadprobe.measure.sampler import sampler_for

    log = PhaseLog(job.phase_log(), gate=job.gate_dir if job.gate else None)
    sampler = None
    if job.timeline:
        cuda = job.config.device != "cpu" and _has_cuda()
        sampler = sampler_for(cuda=cuda, folder=job.workdir).start()
    group = "cgroup" if job.own_cgroup else "tree" if job.cgroup_missing else None

    def on_start(cycle: int, phase: str) -> None:
        log.start(cycle, phase)  # a gated worker waits here first (repro drops the cache)
        if channel is not None:
            channel.mark("start", cycle, phase)  # the parent resets the group's peak

    def on_phase(rec: Any) -> None:
        if channel is not None:
            channel.mark("end", rec.cycle, rec.phase)  # the parent reads the peak
        log.end(rec.cycle, rec.phase, asdict(rec))

    try:
        report = run(
            job.config,
            Hooks(
                on_start=on_start,
                on_phase=on_phase,
                sampler=sampler,
                group=group,
                channel=channel,
            ),
        )
    finally:
        drawn = sampler.stop() if sampler is not None else None
    if drawn is not None:
        import json

        job.timeline_path.write_text(json.dumps(drawn.to_dict()) + "\n")
    return _with_host_note(report, job)


def _with_host_note(report: Report, job: Job) -> Report:
    """Where the host figures came from, on every row."""
    from dataclasses import replace

    if job.own_cgroup:
        from offloadprobe.measure.cgroup import version_at

        path = Path(job.own_cgroup)
        note = (
            f"host figures: each worker's own memory cgroup (v{version_at(path)}) beside "
            "its own RSS, the larger governs; page cache is not counted as held"
        )
    elif job.cgroup_missing:
        note = (
            f"host figures: no memory cgroup could be made ({job.cgroup_missing}); the "
            "worker's process tree's RSS and /dev/shm stand in, other processes' peaks "
            "can be missed"
        )
    else:
        return report
    runs = [replace(r, notes=[*r.notes, note]) for r in report.runs]
    return replace(report, runs=runs)


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _result_rank(job: Job) -> int | None:
    """Whose result file this worker writes: a launched rank its own in the shared folder;
    a rank of the user's torchrun (its parent's folder is its own) and one process the
    plain one."""
    return (_rank() or 0) if job.rank_of_launch else None


def _ranked(job: Job) -> Report | None:
    from offloadprobe.engine.world.run import run_rank

    rank = _rank() or 0
    log = PhaseLog(job.phase_log(rank), gate=job.gate_dir if job.gate and rank == 0 else None)

    def abort(failure: Failure) -> None:  # a rank that must end now (see world.fence)
        _write(job, _result_rank(job), None, failure)

    return run_rank(job, log, on_abort=abort)


def _launch(job: Job) -> tuple[Report | None, Failure | None]:
    from offloadprobe.engine.world.launch import launch

    outcome = launch(job, main)
    report = report_from_dict(outcome.report) if outcome.report is not None else None
    return report, outcome.failure


def _write(
    job: Job,
    rank: int | None,
    report: Report | None,
    failure: Failure | None,
    channel: ParentChannel | None = None,
) -> int:
    code = _exit_code(report, failure)
    result = WorkerResult(
        exit_code=code, report=report.to_dict() if report is not None else None, failure=failure
    )
    result.write(job.result_path(rank))
    if channel is not None and rank is None:
        channel.result(asdict(result))  # what the parent judges, whatever the file says later
    return code


def serve(job: Job) -> int:
    """Run ``job`` in this process and write its result; the exit code it records."""
    ranked = job.rank_of_launch or under_torchrun()
    channel = None
    if job.channel and job.launch is None:  # before any strategy code is imported
        channel = ParentChannel.connect(job.channel, owns_peaks=job.peaks_by_parent)
    report: Report | None = None
    failure: Failure | None = None
    if job.rank_of_launch and job.rank_cgroups:  # a fresh rank: moved before torch's import
        from offloadprobe.engine.world.rankgroups import await_move

        await_move(job.folder, int(os.environ.get("LOCAL_RANK", "0")))
    try:
        if job.launch is None:
            from offloadprobe.engine.runtime.session import resolve_device

            resolve_device(job.config.device)  # bad input before anything is built
        if job.launch is not None:
            report, failure = _launch(job)
        elif ranked:
            report = _ranked(job)
        else:
            report = _single(job, channel)
    except UsageError as exc:
        failure = Failure(kind="bad input", message=str(exc))
    except OffloadProbeError as exc:
        failure = Failure(kind=exc.kind, message=str(exc))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        failure = Failure(kind="crashed", message=f"{type(exc).__name__}: {exc}".splitlines()[0])
    try:
        return _write(job, _result_rank(job), report, failure, channel)
    finally:
        if channel is not None:
            channel.done()


def main(argv: list[str] | None = None) -> int:
    """The worker's entry point: one argument, the job file."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m offloadprobe.engine.worker JOB.json", file=sys.stderr)
        return 2
    collector.pause_for_imports()
    try:
        job = Job.read(Path(args[0]))
    except UsageError as exc:
        print(f"offloadprobe worker: {exc}", file=sys.stderr)
        return 2
    _quiet_third_party()
    try:
        return serve(job)
    finally:
        collector.end_pause()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()


def _quiet_third_party() -> None:
    from offloadprobe.core.chatter import quiet_third_party

    quiet_third_party()


def run_in_process(job: Any) -> int:
    """The worker's work in the calling process (tests of what is not isolation)."""
    return serve(job)


if __name__ == "__main__":
    sys.exit(main())
