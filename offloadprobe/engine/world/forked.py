"""Ranks forked from their launcher, in CPU emulation (the launcher is ``launch``).

A fresh rank is ``python -m offloadprobe.engine.worker RANK_JOB``: some 5.5 CPU-s
importing torch and megatron-core before its job starts, once per rank. In CPU emulation
on a host without a GPU (the zygote's rule: CUDA and a forked child do not mix) the
launcher imports what a rank imports once (``plan``: ``forking.preload`` and the
ranks' own modules) and hands torchrun's launcher a function, ``rank``, with the
``fork`` start method: torch's own ``LocalElasticAgent`` and ``MultiprocessContext``
start, watch and stop the ranks, the rendezvous is unchanged.

A forked rank does, first thing and in this order (``_settle``), what makes it the
process a fresh rank would be:

1. a session of its own, as torch gives a fresh rank (``start_new_session``), and death
   with the launcher (``PR_SET_PDEATHSIG``: no rank outlives it);
2. the signal dispositions and fault handler the launcher had before torch's agent
   installed its own (a fresh rank has neither: SIGTERM kills it), stdin from
   ``/dev/null``, ``multiprocessing``'s idea of the process a main one's, intra-op threads
   as ``OMP_NUM_THREADS`` sets a fresh one's (the launcher's OpenMP read it at its start);
3. its pid in the job folder (``pid_path``): the launcher maps how each rank ended to it;
   then, where the launcher made each rank a memory cgroup of its own, it waits until the
   launcher has moved it there (``rankgroups.await_move``);
4. every page it still shares with the launcher made its own (``forking.unshare_pages``
   against the launcher's pid): its RSS, anonymous and file-backed, is the launcher's
   after the same imports, and its own cgroup (or the node's) is charged for it now,
   before any baseline;

then runs the worker's ``main`` (handed over by the worker that launches: ``plan``'s
``entry``) as a fresh rank does, and ends as its interpreter would
(``_end``): non-daemon threads joined, exit handlers run, its exit code, a ``sys.exit``
message, death by SIGINT for an unhandled ``KeyboardInterrupt``. A rank that ends with 0
returns to torch's wrapper, which tells the agent and exits 0 once the agent has every
rank's answer; any other code is the process's exit status at once, and a signal its
death, as torch's agent sees a fresh rank's.

torch's ``MultiprocessContext`` reports only the first rank it finds failed (the lowest
rank among those ended by the same poll), where a fresh rank's agent reports every rank
that ended other than with 0. ``Reaped`` records every rank's end as the launcher reaps it
(its exit status and when), so that ``ended`` hands ``launch._first_failure`` what a
fresh launch would: a rank the cgroup's OOM killer took is found even where a peer
ended by itself in the same poll.

Threads: at the fork the launcher runs torch's agent in its main thread (the one that
forks), the rendezvous's keep-alive timer (a Python thread, asleep between beats) and the
c10d store's server (``pt_tcpstore_uv``, C++). A forked rank has only the forking thread;
it never touches the store, the rendezvous or their locks (its own store client and gloo
group come from its environment), ``logging`` and ``random`` renew theirs at a fork, the
import lock is taken around it, and the objects of the dead threads are never freed (the
rank ends by ``os._exit``, never unwinding the agent's frames). The launcher runs no
tensor operation before it forks (GNU OpenMP's thread pool does not survive a fork: a
child's next parallel region hangs) and a rank's intra-op threads come from the
environment (``_threads_from_environment``). What still differs from a fresh rank: the
hash seed (the launcher's), the launcher's open descriptors, and a quicker end (no module
teardown).
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from offloadprobe.core.devices import forks_cleanly
from offloadprobe.core.job import Job
from offloadprobe.engine import forking
from offloadprobe.engine.world.rankgroups import await_move


@dataclass(frozen=True, kw_only=True, slots=True)
class ForkPlan:
    """What every forked rank needs from its launcher (inherited, never pickled)."""

    job: str
    """The rank job's path."""
    folder: str
    """The job folder: each rank writes its pid there (``pid_path``)."""
    launcher: int
    zero: tuple[int, int, int]
    """The kernel's zero pages (``forking.zero_pfns``)."""
    handlers: dict[int, Any]
    """The launcher's signal handlers before torch's agent installed its own."""
    faults: bool
    """Whether the launcher's fault handler was on then."""
    main: Any
    """The launcher's ``multiprocessing.current_process()``: a main process."""
    entry: Callable[[list[str]], int]
    """What a rank runs: the worker's ``main`` (``main([job])``)."""
    rank_groups: bool = False
    """The launcher made each rank a memory cgroup of its own (``rankgroups``)."""


def plan(
    job: Job, rank_job: Path, entry: Callable[[list[str]], int], *, rank_groups: bool = False
) -> ForkPlan | None:
    """Import what a rank imports, once, and say how to fork the ranks, each to run
    ``entry`` (the worker's ``main``) on ``rank_job``; None where they
    are fresh interpreters: a GPU host or device, a kernel that hides page frame numbers
    (a rank's pages could not be made its own exactly), imports that initialised CUDA."""
    if not forks_cleanly(job.config.device):
        return None
    zero = forking.zero_pfns()
    if not zero[0]:
        return None
    forking.preload(job.config.engine)
    import torch

    from offloadprobe.engine.world import run  # noqa: F401  (what every rank imports)

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return None
    handlers = {}
    for number in signal.valid_signals():
        with contextlib.suppress(ValueError, OSError):
            handler = signal.getsignal(number)
            if handler is not None:
                handlers[int(number)] = handler
    return ForkPlan(
        job=str(rank_job),
        folder=str(rank_job.parent),
        launcher=os.getpid(),
        zero=zero,
        handlers=handlers,
        faults=faulthandler.is_enabled(),
        main=multiprocessing.current_process(),
        entry=entry,
        rank_groups=rank_groups,
    )


PIDS = "pid-rank"
"""Each forked rank's pid, in the job folder: ``pid-rank<RANK>``."""


def pid_path(folder: Path, rank: int) -> Path:
    """Where forked rank ``rank`` writes its pid."""
    return folder / f"{PIDS}{rank}"


def rank(plan: ForkPlan) -> None:
    """A forked rank's whole life (torch's wrapper calls it in the new process); see the
    module's text."""
    _settle(plan)
    # the command line a fresh rank has: ``python -m offloadprobe.engine.worker RANK_JOB``
    sys.argv = [str(sys.modules[plan.entry.__module__].__file__), plan.job]
    _end(_main(lambda: plan.entry([plan.job])))


def _settle(plan: ForkPlan) -> None:
    os.setsid()
    forking.die_with_parent()
    if os.getppid() != plan.launcher:  # the launcher ended before the line above
        os.kill(os.getpid(), signal.SIGKILL)
    for number, handler in plan.handlers.items():
        with contextlib.suppress(ValueError, OSError, TypeError):
            if signal.getsignal(number) is not handler:
                signal.signal(number, handler)
    if faulthandler.is_enabled() and not plan.faults:
        faulthandler.disable()  # torch's error handler turned it on
    _stdin_from_devnull()
    _main_process(plan.main)
    _threads_from_environment()
    rank = int(os.environ.get("RANK", "0"))
    pid_path(Path(plan.folder), rank).write_text(str(os.getpid()))
    if plan.rank_groups:  # moved by the launcher: what it makes its own is charged there
        await_move(Path(plan.folder), int(os.environ.get("LOCAL_RANK", "0")))
    forking.unshare_pages(plan.zero, plan.launcher)


def _stdin_from_devnull() -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    stdin = sys.stdin
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stdin.fileno()
        if fd != 0:  # multiprocessing's own /dev/null, on a descriptor of its own
            stdin.close()
            os.close(fd)
    encoding = sys.__stdout__.encoding if sys.__stdout__ is not None else "utf-8"
    sys.stdin = open(0, encoding=encoding, closefd=False)  # noqa: SIM115


def _main_process(main: Any) -> None:
    """``multiprocessing`` sees a main process, as in a fresh interpreter: ``main``, the
    launcher's, with a key of its own, and no parent process."""
    from multiprocessing import process

    process._current_process = main  # type: ignore[attr-defined]
    process._parent_process = None  # type: ignore[attr-defined]
    main.authkey = os.urandom(32)


def _threads_from_environment() -> None:
    """Intra-op threads as ``OMP_NUM_THREADS`` gives a fresh rank: OpenMP read the
    variable once, when the launcher (or the zygote it was forked from) started, before
    the launcher set it for its ranks as torchrun does."""
    wanted = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if not wanted.isdigit() or int(wanted) < 1:
        return
    import torch

    if torch.get_num_threads() != int(wanted):
        torch.set_num_threads(int(wanted))


def _main(main: Callable[[], int]) -> int | None:
    """``sys.exit(main())`` as the interpreter handles it: the exit status (None for death
    by SIGINT, an unhandled ``KeyboardInterrupt``)."""
    import traceback

    try:
        code: object = main()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        traceback.print_exc()
        return None
    except BaseException:
        traceback.print_exc()
        return 1
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _end(code: int | None) -> None:
    """End as the interpreter ends: non-daemon threads joined, exit handlers run, the
    streams flushed; then the exit status (0: back to torch's wrapper, which says so to
    the agent and exits 0), or death by SIGINT."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    if code == 0:
        return
    if code is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    os._exit(code)


@dataclass(frozen=True, slots=True)
class RankEnd:
    """How one forked rank ended, as the launcher reaped it (what ``_first_failure``
    reads of torch's ``ProcessFailure``)."""

    exitcode: int
    """Its exit code, or minus the signal that ended it."""
    timestamp: int
    """When it was reaped, in whole seconds (as torch's failures have it)."""


class Reaped:
    """Every child the launcher reaps while this is entered, by pid: torch reaps its
    forked ranks through ``os.waitpid`` (``multiprocessing``'s fork ``Popen``), and this
    reads what each call returned; nothing else changes."""

    def __init__(self) -> None:
        self.ends: dict[int, RankEnd] = {}
        self._real = os.waitpid

    def _waitpid(self, pid: int, options: int) -> tuple[int, int]:
        got, status = self._real(pid, options)
        if got > 0:
            with contextlib.suppress(ValueError):
                code = os.waitstatus_to_exitcode(status)
                self.ends[got] = RankEnd(exitcode=code, timestamp=int(time.time()))
        return got, status

    def __enter__(self) -> Reaped:
        os.waitpid = self._waitpid
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.waitpid = self._real


def pids(folder: Path) -> dict[int, int]:
    """The pid of each rank forked for the job in ``folder``, by rank (those that lived
    long enough to write it)."""
    found = {}
    for path in folder.glob(f"{PIDS}*"):
        with contextlib.suppress(OSError, ValueError):
            found[int(path.name.removeprefix(PIDS))] = int(path.read_text())
    return found


def ended(failures: dict[int, Any], reaped: Reaped, folder: Path) -> dict[int, Any]:
    """Every rank of this node that ended other than with 0, as a fresh launch's agent
    reports them: torch's ``failures`` (the one it found first), each rank's entry as it
    was reaped, and the ranks torch did not report."""
    found = dict(failures)
    for number, pid in pids(folder).items():
        end = reaped.ends.get(pid)
        if end is not None and end.exitcode != 0:
            found[number] = end
    return found


def end_sessions(folder: Path) -> None:
    """SIGKILL whatever is left of each forked rank's session (a process a rank started):
    torch's agent ends a forked rank by its pid, not by its process group as a fresh
    one's, and nothing may outlive the launcher."""
    for pid in pids(folder).values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
