"""Start the ranks of a run over several ranks through torchrun's own launcher.

The launcher is itself a worker (its job has ``launch`` set), started by the parent inside
the node's memory cgroup: ``torch.distributed.launcher.api.elastic_launch`` (the API
behind torchrun) starts every rank as ``python -m offloadprobe.engine.worker RANK_JOB``;
in CPU emulation on a host without a GPU it forks each rank from the launcher instead,
which imported what a rank imports once (``forked``: the same worker's ``main``, in a
process made what a fresh rank would be). Before any rank starts it makes each a memory
cgroup of its own below the node's, and moves every rank there as the rank asks, before
the rank runs anything of the job (``rankgroups``). It then reads back rank 0's report,
or, when a rank failed, a typed failure from the rank that failed first: its exit code or
signal, its own result's failure, the cycle and phase its phase log was in, and the node
cgroup's OOM-kill count (its rank groups' included); a process of a rank found outside
the rank's group fails the run as ``escaped``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from offloadprobe.core import collector
from offloadprobe.core.job import Job, WorkerResult
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.verdicts import signal_message
from offloadprobe.engine.world import forked
from offloadprobe.engine.world.rankgroups import RankGroups
from offloadprobe.measure.cgroup import MemoryGroup
from offloadprobe.measure.phase_log import last_started

ELASTIC_LOGS = "torchelastic"
"""In the launcher's job folder: torch's elastic agent's log folder."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchOutcome:
    """Rank 0's report (when rank 0 ran on this node), or the first rank's failure."""

    report: dict[str, Any] | None
    failure: Failure | None


def free_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _group(job: Job) -> MemoryGroup | None:
    if not job.node_cgroup:
        return None
    return MemoryGroup.at(job.node_cgroup)


def _as_recorded(failure: Any, job: Job, rank: int) -> bool:
    """Whether a rank ended with the exit code its own result records, with no failure in
    it: the verdict of a run that completed (a corruption is exit 1), not a crash."""
    said = WorkerResult.read(job.result_path(rank))
    return (
        failure.exitcode > 0
        and said is not None
        and said.failure is None
        and said.report is not None
        and said.exit_code == failure.exitcode
    )


def _first_failure(
    failures: dict[int, Any], job: Job, group: MemoryGroup | None, oom_before: int | None
) -> Failure:
    """The rank that caused the failure, as a typed failure: a rank the kernel killed
    (SIGKILL) first; else a rank that ended other than by the agent's SIGTERM (the agent
    stops the other ranks with it once one fails); among those the earliest, by torchrun's
    whole-second timestamps, then the lowest rank."""
    stopped, killed = -signal.SIGTERM, -signal.SIGKILL

    def cause(item: tuple[int, Any]) -> tuple[bool, bool, float, int]:
        rank, failure = item
        return failure.exitcode != killed, failure.exitcode == stopped, failure.timestamp, rank

    rank, failure = min(failures.items(), key=cause)
    where = last_started(job.phase_log(rank))
    cycle, phase = where if where else (None, None)
    code = failure.exitcode
    if code < 0:
        after = group.oom_kills() if group is not None else None
        message = signal_message(-code, oom_before, after)
        return Failure(
            kind="killed",
            message=f"rank {rank}: {message}",
            cycle=cycle,
            phase=phase,
            exit_code=code,
        )
    said = WorkerResult.read(job.result_path(rank))
    if said is not None and said.failure is not None:
        return replace(said.failure, message=f"rank {rank}: {said.failure.message}", exit_code=code)
    return Failure(
        kind="crashed",
        message=f"rank {rank}: exit code {code}",
        cycle=cycle,
        phase=phase,
        exit_code=code,
    )


def launch(
    job: Job, entry: Callable[[list[str]], int], *, python: str = sys.executable
) -> LaunchOutcome:
    """Run the job on ``job.launch.nproc_per_node`` ranks of this node; wait for all. A
    forked rank runs ``entry`` (the worker's ``main``), a fresh one the worker module."""
    assert job.launch is not None
    how = job.launch
    node, missing = job.node_cgroup, job.node_cgroup_missing
    groups = RankGroups.make(job.folder, node, missing, how.nproc_per_node)
    rank_job = replace(
        job.rank_job(),
        rank_cgroups=job.node_cgroup if groups.groups else None,
        rank_cgroups_missing=groups.missing,
    )
    path = rank_job.write()
    plan = forked.plan(job, path, entry, rank_groups=bool(groups.groups))  # imports frozen
    collector.resume()  # the launcher runs in the node's cgroup as long as its ranks do
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    group = _group(job)
    config = LaunchConfig(
        # the agent's log folder (its ranks' error files) in the launcher's own job folder,
        # which the parent removes however the run ends, not a torchelastic_* of its own
        # in $TMPDIR that nothing removes
        logs_specs=DefaultLogsSpecs(log_dir=str(job.folder / ELASTIC_LOGS)),
        min_nodes=how.nnodes,
        max_nodes=how.nnodes,
        nproc_per_node=how.nproc_per_node,
        run_id=how.run_id,
        rdzv_backend="c10d",
        rdzv_endpoint=how.rdzv_endpoint or free_endpoint(),
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn" if plan is None else "fork",
    )
    if how.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"  # as torchrun does: ranks of a node share cores
    oom_before = group.oom_kills() if group is not None else None
    failure = None
    failures = None
    reaped = forked.Reaped()
    escaped = None
    groups.start()  # moves each rank into its own group as it asks, then watches them
    try:
        if plan is None:
            elastic_launch(config, python)("-m", "offloadprobe.engine.worker", str(path))
        else:
            with reaped:
                elastic_launch(config, forked.rank)(plan)
    except ChildFailedError as err:
        failures = err.failures
    except Exception as err:  # rendezvous timeout, a signal torchrun turned into one
        failure = Failure(
            kind="crashed",
            message=f"torchrun's launcher: {type(err).__name__}: {err}".splitlines()[0],
        )
    finally:
        escaped = groups.stop()
        if plan is not None:
            forked.end_sessions(rank_job.folder)
    if failures is not None:
        if plan is not None:
            failures = forked.ended(failures, reaped, rank_job.folder)
        rest = {r: f for r, f in failures.items() if not _as_recorded(f, rank_job, r)}
        if len(rest) < len(failures) and all(f.exitcode == -signal.SIGTERM for f in rest.values()):
            rest = {}  # the agent stopped the others after rank 0 reported with its verdict
        failure = _first_failure(rest, rank_job, group, oom_before) if rest else None
    result = WorkerResult.read(rank_job.result_path(0))
    report = result.report if result is not None else None
    if failure is None and result is not None and result.failure is not None:
        failure = result.failure
    if escaped is not None:  # its figures miss what the escaped process held
        failure = Failure(kind="escaped", message=escaped, exit_code=1)
    return LaunchOutcome(report=report, failure=failure)
