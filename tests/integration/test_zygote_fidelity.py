"""A worker forked by the zygote's own loop (``engine.zygote.serve``) is charged and ends
as a fresh interpreter of the worker module would be.

GIVEN a stand-in zygote (a fork of this test process, which holds torch's libraries,
relocated) serving requests on its stdin, with the worker module's ``main`` replaced by a
probe, WHEN it forks a worker into a memory cgroup of its own, THEN every anonymous page
the worker holds is charged to that group (``/proc/kpagecgroup``), not to the zygote's:
its group's figures are a fresh interpreter's. And a worker whose ``main`` leaves a
non-daemon thread running, raises ``KeyboardInterrupt`` or calls ``sys.exit`` with a
message ends as the interpreter ends ``sys.exit(main())``: the thread's exit status,
death by SIGINT, the message on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from offloadprobe.engine import forking
from offloadprobe.engine import zygote as child_side

pytestmark = pytest.mark.processes(1)

MiB = 2**20
ZERO = forking.zero_pfns()
KPAGECGROUP = Path("/proc/kpagecgroup")


def _foreign_anonymous_bytes(group_inode: int) -> int:
    """Bytes of present anonymous pages of this process charged to another memory cgroup
    than ``group_inode`` (the kernel's zero pages excepted: they are charged to none)."""
    small, first, end = ZERO
    foreign = 0
    with (
        open("/proc/self/pagemap", "rb", buffering=0) as pagemap,
        KPAGECGROUP.open("rb", buffering=0) as owners,
    ):
        for start, stop, _, _ in forking.mappings():
            pagemap.seek(start // forking.PAGE * 8)
            raw = pagemap.read((stop - start) // forking.PAGE * 8)
            entries = np.frombuffer(raw, dtype=np.uint64)
            anonymous = (entries >> np.uint64(63)) & ~(entries >> np.uint64(61)) & np.uint64(1)
            for pfn in (entries & np.uint64((1 << 55) - 1))[anonymous == 1]:
                pfn = int(pfn)
                if pfn == small or first <= pfn < end:
                    continue
                owners.seek(pfn * 8)
                if int.from_bytes(owners.read(8), "little") != group_inode:
                    foreign += forking.PAGE
    return foreign


def _ended(answers: IO[bytes]) -> dict:
    """The zygote's message that its (one) worker ended."""
    for line in answers:
        said = json.loads(line)
        if "ended" in said:
            return said
    raise AssertionError("the zygote ended before its worker")


@contextlib.contextmanager
def _zygote(main: Callable[[list[str]], int]) -> Iterator[Callable[[dict], dict]]:
    """A fork of this process running ``serve`` with ``worker.main`` replaced by ``main``;
    yields a call that asks for one worker and returns the zygote's "ended" message."""
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the stand-in zygote, and (through serve's fork) each worker
        try:
            from offloadprobe.engine import worker

            worker.main = main
            os.dup2(requests_r, 0)
            os.dup2(answers_w, 1)
            for fd in (requests_r, requests_w, answers_r, answers_w):
                os.close(fd)
            child_side.serve(ZERO, {})
        finally:
            os._exit(0)
    os.close(requests_r)
    os.close(answers_w)
    answers = os.fdopen(answers_r, "rb")

    def ask(request: dict) -> dict:
        os.write(requests_w, (json.dumps(request) + "\n").encode())
        return _ended(answers)

    try:
        yield ask
    finally:
        os.close(requests_w)
        answers.close()
        os.waitpid(pid, 0)


def _request(tmp_path: Path, procs: str = "") -> dict:
    return {
        "job": str(tmp_path / "probe.json"),
        "out": str(tmp_path / "stdout.log"),
        "err": str(tmp_path / "stderr.log"),
        "procs": procs,
        "env": dict(os.environ),
    }


@pytest.mark.skipif(ZERO[0] == 0, reason="page frame numbers are hidden here")
def test_every_anonymous_page_of_a_forked_worker_is_charged_to_its_own_cgroup(tmp_path):
    import torch  # noqa: F401  (its libraries' relocated read-only data is shared too)

    from offloadprobe.measure.cgroup import CgroupUnavailable, create_group

    try:
        group = create_group(f"offloadprobe-test-zygote-{uuid.uuid4().hex[:8]}")
    except CgroupUnavailable as why:
        pytest.skip(str(why))
    inode = os.stat(group.path).st_ino

    def probe(argv: list[str]) -> int:
        status = dict(
            line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
        )
        found = {
            "foreign": _foreign_anonymous_bytes(inode),
            "rss_anon": int(status["RssAnon"].split()[0]) * 1024,
            "group_anon": group.stat().get("rss", group.stat().get("anon", 0)),
        }
        Path(argv[0]).write_text(json.dumps(found))
        return 0

    try:
        with _zygote(probe) as ask:
            ended = ask(_request(tmp_path, str(group.procs)))
        seen = json.loads((tmp_path / "probe.json").read_text())
    finally:
        group.kill()
        group.remove()
    assert ended["status"] == 0, (tmp_path / "stderr.log").read_text()
    # a fresh interpreter's pages are all its own group's: a few pages the zygote wrote
    # between its fork and its wait are the most a forked one may hold of another's
    assert seen["foreign"] <= 1 * MiB, seen
    assert seen["group_anon"] >= seen["rss_anon"] - 1 * MiB, seen


ENDINGS = """
import json, os, sys, threading, time

from offloadprobe.engine import forking, worker, zygote

sys.path[0] = os.getcwd()  # as ``python -m`` has it: the directory it started in


def where(argv):
    import shadowed

    found = {"cwd": os.getcwd(), "path": sys.path[0], "imported": shadowed.WHERE}
    open(argv[0], "w").write(json.dumps(found))
    return 0


def leaves_a_thread(argv):
    def late():
        time.sleep(0.3)
        os._exit(3)

    threading.Thread(target=late, daemon=False).start()
    return 0


def interrupted(argv):
    raise KeyboardInterrupt


def exits_with_a_message(argv):
    raise SystemExit("the strategy gave up")


worker.main = globals()[sys.argv[1]]
zygote.serve(forking.zero_pfns(), {})
"""
"""A zygote of its own (a small interpreter, its ``serve`` at the top of its stack as in
``python -m offloadprobe.engine.zygote``) whose ``worker.main`` is the one named."""


@pytest.mark.parametrize(
    ("main", "status", "stderr"),
    [
        ("leaves_a_thread", 3, None),  # the interpreter joins it before it exits
        ("interrupted", -2, "KeyboardInterrupt"),  # it dies by SIGINT, after the traceback
        ("exits_with_a_message", 1, "the strategy gave up"),  # printed on stderr
    ],
    ids=["non-daemon thread", "KeyboardInterrupt", "sys.exit message"],
)
def test_a_forked_worker_ends_as_an_interpreter_ends(tmp_path, main, status, stderr):
    ended = _one_worker(tmp_path, main, tmp_path)
    err = (tmp_path / "stderr.log").read_text()
    assert ended["status"] == status, err
    if stderr is not None:
        assert stderr in err


def _one_worker(tmp_path: Path, main: str, cwd: Path, then: Callable[[], None] = lambda: None):
    """One worker of a zygote (``ENDINGS``) started in ``cwd``, asked for after ``then``."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    zygote = subprocess.Popen(
        [sys.executable, "-c", ENDINGS, main],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    try:
        then()
        zygote.stdin.write((json.dumps(_request(tmp_path)) + "\n").encode())
        zygote.stdin.flush()
        return _ended(zygote.stdout)
    finally:
        zygote.kill()
        zygote.wait()


def test_a_forked_worker_works_where_its_parent_works_now(tmp_path, monkeypatch):
    """The parent moved since the zygote started (a pytest test's ``chdir``, a script that
    measures in several folders): a fresh interpreter would start where the parent is now,
    import the user's module from there, and so does a forked worker."""
    started, now = tmp_path / "started", tmp_path / "now"
    for folder in (started, now):
        folder.mkdir()
        (folder / "shadowed.py").write_text(f"WHERE = {folder.name!r}\n")
    ended = _one_worker(tmp_path, "where", started, then=lambda: monkeypatch.chdir(now))
    assert ended["status"] == 0, (tmp_path / "stderr.log").read_text()
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen == {"cwd": str(now), "path": str(now), "imported": "now"}
