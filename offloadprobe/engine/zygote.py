"""The zygote: one interpreter that imports what every CPU-emulation worker imports, once,
and forks a worker per job (``python -m offloadprobe.engine.zygote``; the parent's side is
``isolation.zygote``).

A fresh worker spends some 5.5 CPU-s importing torch and megatron-core before its job
starts: every row of ``compare`` and ``repro`` paid it again. The zygote pays it once
(``preload``: megatron-core imported as CPU emulation imports it, torch.compile off, the
modules every run imports, the collector's survivors frozen); no CUDA is touched, and only
CPU emulation is served (CUDA and a forked driver do not mix).

It reads one request per line on stdin (a JSON object: the job file, the two log files,
the cgroup's ``cgroup.procs`` or "", the environment) and answers on stdout, one JSON
object per line: ``{"started": PID}`` in the order of the requests, ``{"ended": PID,
"status": N}`` when it reaps a worker (its exit code, or minus the signal that killed
it). It ends when stdin closes (the parent has gone), and dies with the parent.

The worker is born in its memory cgroup: the zygote joins the group, forks, and goes
back only once the worker has made its pages its own (``_enter``, ``_leave``). What the
fork itself allocates (page tables, the new process's kernel structures) and every page
the worker copies before its own code could have joined are then charged to the worker's
group, as a fresh interpreter's are; the zygote meanwhile only says that the worker
started and waits (each page it writes would leave the worker's copy charged to the
zygote's group: some tens of pages in all, against some 1,400 before).

A forked worker then does, first thing and in this order (``_child``):

1. a session of its own (its process group is what the parent ends) that dies with the
   zygote (``PR_SET_PDEATHSIG``);
2. its output to the job folder's logs, stdin from ``/dev/null``, its environment the
   job's plus what the zygote's imports set in theirs (as a fresh worker's imports
   would: ``TORCHINDUCTOR_CACHE_DIR``), its working directory the parent's now
   (``_take_directory``);
3. every page it still shares with the zygote made its own (``unshare_pages``): charged
   to its own cgroup now, before its baseline, not page by page in whichever phase first
   writes to it, as copy-on-write would;
4. the worker's ``main``, ended as ``python -m offloadprobe.engine.worker JOB`` ends
   (``sys.exit`` of its code through the interpreter's own shutdown: non-daemon threads
   joined, exit handlers, a ``sys.exit`` message printed, death by SIGINT for an
   unhandled ``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
from pathlib import Path
from typing import Any

from offloadprobe.engine.forking import die_with_parent, preload, unshare_pages, zero_pfns


def _redirect(path: str, fd: int) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)


def _child(request: dict[str, Any], session: int, settled: int, joined: OSError | None) -> None:
    """A forked worker's whole life (the module's text); it ends as the worker module's
    ``sys.exit(main())`` does, through the interpreter's own shutdown. ``session`` is
    closed once it has a session of its own: the zygote says it started only then, as a
    ``Popen`` returns only after its child's ``preexec`` ran (the parent may end its
    process group from then on). ``settled`` is closed once its pages are its own: the
    zygote leaves the worker's cgroup only then. ``joined``: why the zygote could not
    enter the cgroup, if it could not."""
    os.setsid()
    die_with_parent()
    os.close(session)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _redirect(request["out"], 1)
    _redirect(request["err"], 2)
    if joined is not None:
        os.close(settled)
        print(f"offloadprobe worker: could not join its memory cgroup: {joined}", file=sys.stderr)
        raise SystemExit(1)
    os.environ.clear()
    os.environ.update({**request["env"], **request["imported"]})
    _take_directory(request["cwd"])
    try:
        unshare_pages(tuple(request["zero"]), os.getppid())
    finally:
        os.close(settled)
    from offloadprobe.engine import worker

    sys.argv = [worker.__file__, request["job"]]
    raise SystemExit(worker.main([request["job"]]))


def _take_directory(path: str) -> None:
    """Work in ``path`` (the parent's working directory when it asked for this worker, not
    the zygote's when it started), with the import path a ``python -m`` started there has:
    its first entry, the directory it started in, is ``path`` too."""
    try:
        before: str | None = os.getcwd()
    except OSError:  # the zygote's own directory was removed
        before = None
    with contextlib.suppress(OSError):
        os.chdir(path)
    if sys.path and sys.path[0] == before:
        with contextlib.suppress(OSError):
            sys.path[0] = os.getcwd()


def _enter(procs: str) -> tuple[Path | None, OSError | None]:
    """The zygote into the worker's memory cgroup (``procs``, its ``cgroup.procs``; ""
    for none) before it forks the worker: the group to go back to afterwards (None: it
    did not move), and what stopped it entering, if anything."""
    if not procs:
        return None, None
    from offloadprobe.measure.cgroup import MemoryGroup, home_procs

    home = home_procs(MemoryGroup.at(Path(procs).parent))
    try:
        Path(procs).write_text(str(os.getpid()))
    except OSError as exc:
        return None, exc
    return home, None


def _leave(home: Path | None) -> None:
    """The zygote back where it came from, once the worker settled; a zygote that cannot go
    back ends (it would be killed with the worker's group)."""
    if home is None:
        return
    try:
        home.write_text(str(os.getpid()))
    except OSError:
        raise SystemExit(1) from None


def _fork(request: dict[str, Any], zygote: int) -> int:
    """Fork the worker ``request`` asks for, inside its memory cgroup; its pid, said to
    the parent once the worker has its own session. The zygote leaves the group (and
    writes anything more) only once the worker's pages are its own."""
    session_r, session_w = os.pipe()
    settled_r, settled_w = os.pipe()
    home, joined = _enter(request["procs"])
    try:
        pid = os.fork()
        if pid == 0:  # the worker: it never comes back here
            os.close(session_r)
            os.close(settled_r)
            _child(request, session_w, settled_w, joined)
        os.close(session_w)
        os.close(settled_w)
        os.read(session_r, 1)  # end of file: it has its session, or died trying
        os.close(session_r)
        os.write(1, b'{"started": %d}\n' % pid)  # _say's line, with less to write meanwhile
        os.read(settled_r, 1)  # end of file: its pages are its own, or it died trying
        os.close(settled_r)
    finally:
        if os.getpid() == zygote:
            _leave(home)
    return pid


def _say(message: dict[str, int]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def serve(zero: tuple[int, int, int], imported: dict[str, str]) -> None:
    """Fork a worker for each request on stdin until stdin closes; report each start and
    each end on stdout."""
    pending = b""
    live: set[int] = set()
    zygote = os.getpid()
    while True:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready:
            data = os.read(0, 1 << 16)
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                # the asker's working directory now, as a Popen would have inherited it
                asker = f"/proc/{os.getppid()}/cwd"
                request = {"cwd": asker, **json.loads(line), "zero": zero, "imported": imported}
                live.add(_fork(request, zygote))
        while live:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            live.discard(pid)
            # an exit code, or minus the signal that ended it (as ``Popen`` has it)
            _say({"ended": pid, "status": os.waitstatus_to_exitcode(wait_status)})


POLL_S = 0.02
"""How often the zygote looks for ended workers while no request comes."""


def main() -> None:
    """Preload, then serve; or refuse (and end) where page frame numbers are hidden (the
    zero page could not be told from a shared page, nor a worker's pages made its own
    exactly) or where the imports initialised CUDA (a forked child cannot use it)."""
    die_with_parent()
    zero = zero_pfns()
    if not zero[0]:
        _say({"refused": 1})
        return
    before = dict(os.environ)
    from offloadprobe.core import collector

    collector.pause_for_imports()  # preload's pause: the worker module's leftovers frozen too
    from offloadprobe.engine import worker  # noqa: F401  (every job runs its main)

    preload(sys.argv[1] if len(sys.argv) > 1 else None)  # the engine it serves
    import torch

    # what the imports set (torch: TORCHINDUCTOR_CACHE_DIR; CPU emulation:
    # TORCHDYNAMO_DISABLE), a fresh worker's imports would set in its environment too
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}

    if torch.cuda.is_initialized():  # a forked child could not use CUDA again
        _say({"refused": 1})
        return
    _say({"ready": os.getpid()})
    serve(zero, imported)


if __name__ == "__main__":
    main()
