"""Start the ranks of a run over several ranks through torchrun's own launcher.

``offloadprobe run --nproc-per-node N`` does what ``torchrun --nproc-per-node N -m
offloadprobe run ...`` would, through ``torch.distributed.launcher.api.elastic_launch``
(the API behind torchrun): it makes the node's memory cgroup first and starts the agent
and every rank inside it, then reads back rank 0's report, or, when a rank failed, a
typed failure from the rank that failed first (its exit code or signal, its own error
record, the cycle and phase its phase log was in, and the node cgroup's OOM-kill count).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core import collector
from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import ERROR_FILE_ENV
from offloadprobe.core.records import ChildFailure
from offloadprobe.core.world import rank_file
from offloadprobe.engine.world.nodegroup import NODE_CGROUP_ENV, NODE_CGROUP_MISSING_ENV
from offloadprobe.isolation.child import signal_message
from offloadprobe.measure.memory_cgroup import (
    CgroupUnavailable,
    MemoryGroup,
    create_group,
    home_procs,
    node_group_name,
)
from offloadprobe.measure.phase_log import last_started

RUN_ID_ENV = "OFFLOADPROBE_RUN_ID"
"""A parent's run id for the ranks a child launches, so that it can find (and on a timeout
kill) their node group."""
LAUNCHED_ENV = "OFFLOADPROBE_LAUNCHED"
"""Set for ranks this launcher started: rank 0 writes the report and prints nothing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """How to start the ranks: torchrun's own settings."""

    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous (several nodes); a free local port otherwise."""
    run_id: str | None = None
    timeout_s: float | None = None
    node_limit_bytes: int | None = None
    """Cap the node cgroup at this many bytes (``repro`` at node level)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchOutcome:
    """Rank 0's report (when rank 0 ran on this node), or the first rank's failure."""

    report: dict[str, Any] | None
    failure: ChildFailure | None
    node_cgroup: str | None
    oom_kills: int | None
    """OOM kills the kernel recorded in the node cgroup during the run."""


def _node_group(run_id: str) -> tuple[MemoryGroup | None, str | None]:
    try:
        return create_group(node_group_name(run_id)), None
    except (CgroupUnavailable, OSError) as err:
        return None, str(err)


def rendezvous_id(endpoint: str) -> str:
    """One run id every node derives alike from the shared endpoint (c10d keys its state by
    it), so the nodes of one run meet."""
    import hashlib

    return "op-" + hashlib.sha1(endpoint.encode()).hexdigest()[:10]


def _free_endpoint() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _first_failure(
    failures: dict[int, Any], work: Path, group: MemoryGroup | None, oom_before: int | None
) -> ChildFailure:
    """The rank that caused the failure, as a typed failure: a rank the kernel killed
    (SIGKILL) first; else a rank that ended other than by the agent's SIGTERM (the agent
    stops the other ranks with it once one fails); among those the earliest, by torchrun's
    whole-second timestamps, then the lowest rank."""
    stopped = -signal.SIGTERM

    killed = -signal.SIGKILL

    def cause(item: tuple[int, Any]) -> tuple[bool, bool, float, int]:
        rank, failure = item
        # the kernel's SIGKILL (an OOM kill) first: its peers then fail in a collective or
        # are stopped, and torchrun's timestamps are whole seconds
        return failure.exitcode != killed, failure.exitcode == stopped, failure.timestamp, rank

    rank, failure = min(failures.items(), key=cause)
    where = last_started(rank_file(work / "phases.jsonl", rank))
    cycle, phase = where if where else (None, None)
    code = failure.exitcode
    if code < 0:
        after = group.oom_kills() if group is not None else None
        message = signal_message(-code, oom_before, after)
        return ChildFailure(
            kind="killed", exit_code=code, message=f"rank {rank}: {message}", cycle=cycle,
            phase=phase,
        )  # fmt: skip
    try:
        said = json.loads(rank_file(work / "error.json", rank).read_text())
    except (OSError, ValueError):
        said = {"kind": "crashed", "message": f"exit code {code}"}
    return ChildFailure(
        kind=str(said["kind"]), exit_code=code, message=f"rank {rank}: {said['message']}",
        cycle=cycle, phase=phase,
    )  # fmt: skip


def launch(cfg: RunConfig, how: Launch, *, python: str = sys.executable) -> LaunchOutcome:
    """Run ``cfg`` on ``how.nproc_per_node`` ranks of this node; wait for all of them."""
    collector.resume()  # the launcher runs in the node's cgroup as long as its ranks do
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run_id = how.run_id or os.environ.get(RUN_ID_ENV) or uuid.uuid4().hex[:12]
    given = os.environ.get(NODE_CGROUP_ENV)
    if given:  # a parent (repro) made the group, limits it and removes it
        path = Path(given)
        group, missing = MemoryGroup(2 if (path / "memory.current").exists() else 1, path), None
    else:
        group, missing = _node_group(run_id)
    with tempfile.TemporaryDirectory(prefix="offloadprobe-ranks-") as tmp:
        work = Path(tmp)
        config, out = work / "config.json", work / "report.json"
        config.write_text(json.dumps(cfg.to_dict()))
        env = {LAUNCHED_ENV: "1", ERROR_FILE_ENV: str(work / "error.json")}
        if how.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = "1"  # as torchrun does: ranks of a node share its cores
        env.update({NODE_CGROUP_ENV: str(group.path)} if group else {})
        env.update({NODE_CGROUP_MISSING_ENV: missing} if missing else {})
        args = ["-m", "offloadprobe", "run", "--config", str(config), "--json", str(out)]
        args += ["--no-progress", "--phase-log", str(work / "phases.jsonl")]
        launch_config = LaunchConfig(
            min_nodes=how.nnodes,
            max_nodes=how.nnodes,
            nproc_per_node=how.nproc_per_node,
            run_id=run_id,
            rdzv_backend="c10d",
            rdzv_endpoint=how.rdzv_endpoint or _free_endpoint(),
            max_restarts=0,
            monitor_interval=0.1,
            start_method="spawn",
        )
        # elastic_launch also sets the signals its agent handles in our environment
        saved = {k: os.environ.get(k) for k in [*env, "TORCHELASTIC_SIGNALS_TO_HANDLE"]}
        oom_before = group.oom_kills() if group is not None else None
        failure = None
        try:
            os.environ.update(env)
            if group is not None:
                if how.node_limit_bytes is not None:
                    group.set_limit(how.node_limit_bytes)
                with _inside(group, move=not given):
                    elastic_launch(launch_config, python)(*args)
            else:
                elastic_launch(launch_config, python)(*args)
        except ChildFailedError as err:
            failure = _first_failure(err.failures, work, group, oom_before)
        except Exception as err:  # rendezvous timeout, a signal torchrun turned into one
            failure = ChildFailure(
                kind="crashed", exit_code=1,
                message=f"torchrun's launcher: {type(err).__name__}: {err}".splitlines()[0],
            )  # fmt: skip
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            kills = None
            if group is not None:
                after = group.oom_kills()
                kills = None if after is None or oom_before is None else after - oom_before
                if not given:
                    with contextlib.suppress(OSError):
                        group.remove()
        report = json.loads(out.read_text()) if out.exists() else None
        return LaunchOutcome(
            report=report,
            failure=failure,
            node_cgroup=(
                f"cgroup v{group.version} {group.path}" + (f"; {group.note}" if group.note else "")
                if group
                else None
            ),
            oom_kills=kills,
        )


@contextlib.contextmanager
def _inside(group: MemoryGroup, *, move: bool = True):
    """Run the torchrun agent (and so every rank it spawns) inside ``group``; move this
    process back to where it was afterwards (a parent that put us there keeps us there)."""
    if not move:
        yield
        return
    before = home_procs(group)
    group.procs.write_text(str(os.getpid()))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            before.write_text(str(os.getpid()))


def run_ranks(cfg: RunConfig, how: Launch, *, show: bool = True) -> Any:
    """``offloadprobe run`` over several ranks: the world's ``Report`` from rank 0; a report
    whose one row carries the failure when a rank failed; None when rank 0 ran on another
    node (that node's run prints the report)."""
    from offloadprobe.core.records import report_from_dict

    if show:
        print(
            f"offloadprobe: starting {how.nproc_per_node} rank(s) on this node through "
            "torchrun's launcher",
            file=sys.stderr,
        )
    outcome = launch(cfg, how)
    if outcome.report is not None:
        return report_from_dict(outcome.report)
    if outcome.failure is None:
        return None
    if outcome.failure.kind == "bad input":
        from offloadprobe.core.errors import UsageError

        raise UsageError(outcome.failure.message)
    return failed_report(cfg, outcome.failure, how)


def failed_report(cfg: RunConfig, failure: ChildFailure, how: Launch) -> Any:
    """A report with one row that says which rank failed, how, and where."""
    from offloadprobe.engine.runner import failed_run, report_of

    where = f" (cycle {failure.cycle}, phase {failure.phase})" if failure.phase else ""
    row = failed_run(
        cfg, failure=failure.message + where, kind=failure.kind, cycle=failure.cycle,
        phase=failure.phase,
    )  # fmt: skip
    return report_of(
        cfg, row, device=cfg.device, emulated=cfg.device == "cpu", note=None,
        extra_settings={"nproc_per_node": how.nproc_per_node, "nnodes": how.nnodes},
    )  # fmt: skip
