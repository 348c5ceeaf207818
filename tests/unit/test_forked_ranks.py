"""Ranks forked from their launcher (``engine.world.forked``), without torch: how a forked
rank ends, how the launcher reads how every rank ended, and which verdict follows.

torch's ``MultiprocessContext`` reports only the first rank it finds failed: with a rank
the cgroup's OOM killer took and a peer that exited by itself in the same poll, it names
the lower rank (seen: rank 0's exit code 3 beside rank 1's SIGKILL). A fresh launch's
agent reports both, and the verdict is the SIGKILL; so must a forked one's.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from offloadprobe.core.config import ModelConfig, RunConfig
from offloadprobe.core.job import Job
from offloadprobe.engine.world import forked
from offloadprobe.engine.world.launch import _first_failure


def _rank_job(folder: Path) -> Job:
    return Job(config=RunConfig(model=ModelConfig()), workdir=str(folder), rank_of_launch=True)


def _forked(pid: int, rank: int, folder: Path) -> None:
    forked.pid_path(folder, rank).write_text(str(pid))


def test_a_rank_the_oom_killer_took_is_the_cause_though_torch_named_its_peer(tmp_path):
    job = _rank_job(tmp_path)
    _forked(101, 0, tmp_path)
    _forked(102, 1, tmp_path)
    seen_by_torch = {0: SimpleNamespace(exitcode=3, timestamp=50)}
    reaped = forked.Reaped()
    reaped.ends = {101: forked.RankEnd(exitcode=3, timestamp=50)}
    reaped.ends[102] = forked.RankEnd(exitcode=-signal.SIGKILL, timestamp=50)
    failures = forked.ended(seen_by_torch, reaped, tmp_path)
    assert {rank: f.exitcode for rank, f in failures.items()} == {0: 3, 1: -9}
    failure = _first_failure(failures, job, SimpleNamespace(oom_kills=lambda: 1), 0)
    assert failure.kind == "killed" and failure.exit_code == -9
    assert failure.message == "rank 1: SIGKILL, cgroup OOM (oom_kill 0 -> 1)"
    # torch's report alone names the wrong rank: the control
    alone = _first_failure(seen_by_torch, job, SimpleNamespace(oom_kills=lambda: 1), 0)
    assert alone.kind == "crashed" and alone.message.startswith("rank 0")


def test_ranks_that_ended_with_0_or_wrote_no_pid_are_left_as_torch_saw_them(tmp_path):
    _forked(201, 0, tmp_path)
    _forked(202, 1, tmp_path)
    reaped = forked.Reaped()
    reaped.ends = {201: forked.RankEnd(exitcode=0, timestamp=1)}
    seen = {2: SimpleNamespace(exitcode=-15, timestamp=1)}  # rank 2 died before its pid
    assert forked.ended(seen, reaped, tmp_path) == seen


def test_every_child_reaped_is_recorded_with_its_exit_status():
    reaped = forked.Reaped()
    real = os.waitpid
    with reaped:
        assert os.waitpid is not real
        pids = []
        for how in ("exit", "kill"):
            pid = os.fork()
            if pid == 0:  # the child: nothing here may raise out of it
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(7)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
    assert os.waitpid is real
    assert [reaped.ends[pid].exitcode for pid in pids] == [7, -9]


def _leaves_a_thread() -> int:
    import threading
    import time

    def late() -> None:
        time.sleep(0.2)
        os._exit(3)

    threading.Thread(target=late, daemon=False).start()
    return 0


def _interrupted() -> int:
    raise KeyboardInterrupt


def _gives_up() -> int:
    raise SystemExit("the strategy gave up")


@pytest.mark.parametrize(
    ("main", "status", "stderr"),
    [
        (lambda: 0, 42, ""),  # 0: back to torch's wrapper (here: exits 42)
        (lambda: 1, 1, ""),
        (_leaves_a_thread, 3, ""),  # joined before the exit, as the interpreter does
        (_interrupted, -2, "KeyboardInterrupt"),  # death by SIGINT after the traceback
        (_gives_up, 1, "the strategy gave up"),  # the message on stderr
    ],
    ids=["0 returns", "exit code", "non-daemon thread", "KeyboardInterrupt", "sys.exit message"],
)
def test_a_forked_rank_ends_as_an_interpreter_ends(tmp_path, main, status, stderr):
    err = tmp_path / "stderr"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: nothing here may raise out of it
        try:
            sys.stderr = err.open("w")  # pytest holds the real one
            signal.signal(signal.SIGINT, signal.default_int_handler)
            forked._end(forked._main(main))
        finally:
            os._exit(42)
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == status
    assert stderr in err.read_text()
