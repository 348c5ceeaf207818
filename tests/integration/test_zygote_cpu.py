"""CPU-emulation workers forked from the zygote are measured as fresh ones would be.

GIVEN a process that imported torch and megatron-core (this test process stands for the
zygote), WHEN it forks and the child makes its memory its own (``unshare_pages``), THEN
no page is shared copy-on-write any more and the child's RSS, anonymous and file-backed,
is the parent's: what a fresh interpreter holds after the same imports, before any
baseline. Before that call both differ (the control: the check can fail). And a forked
worker that the kernel kills is reported as a fresh one is: killed by SIGKILL, in the
phase it was in, with the phases it recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from offloadprobe.core.devices import has_gpu
from offloadprobe.engine import forking as child_side
from offloadprobe.isolation import zygote
from tests.conftest import TINY, invoke_cli
from tests.integration.user_strategies import started_mark

pytestmark = pytest.mark.processes(1)  # one zygote worker (the fork below imports nothing)

MiB = 2**20
ZERO = child_side.zero_pfns()
NEEDS_PFNS = pytest.mark.skipif(ZERO[0] == 0, reason="page frame numbers are hidden here")


def _status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def _shared_pages() -> int:
    total = 0
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for start, end, perms, _ in child_side.mappings():
            if perms != "rw-p":
                continue
            pagemap.seek(start // child_side.PAGE * 8)
            raw = pagemap.read((end - start) // child_side.PAGE * 8)
            entries = np.frombuffer(raw, dtype=np.uint64)
            total += sum(n for _, n in child_side.shared_runs(entries, ZERO))
    return total


@NEEDS_PFNS
def test_a_forked_child_holds_what_its_parent_holds_and_shares_nothing():
    import torch  # noqa: F401  (the parent holds what a zygote holds)

    read, write = os.pipe()
    parent = _status()
    pid = os.fork()
    if pid == 0:  # the child: nothing here may raise out of it
        code = 1
        try:
            before = {**_status(), "shared": _shared_pages()}
            child_side.unshare_pages(ZERO, os.getppid())
            after = {**_status(), "shared": _shared_pages()}
            os.write(write, json.dumps({"before": before, "after": after}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        seen = json.loads(pipe.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and seen
    before, after = seen["before"], seen["after"]
    # control: straight after fork the child shares its parent's pages and has not mapped
    # most of the parent's code
    assert before["shared"] * child_side.PAGE > 20 * MiB, before
    assert before["RssFile"] < parent["RssFile"] - 20 * MiB, (before, parent)
    assert after["shared"] <= 16, after  # a few pages the check itself wrote meanwhile
    assert abs(after["RssFile"] - parent["RssFile"]) <= 4 * MiB, (after, parent)
    assert parent["RssAnon"] - 2 * MiB <= after["RssAnon"] <= parent["RssAnon"] + 12 * MiB


@pytest.mark.skipif(has_gpu(), reason="a GPU host forks no worker (CUDA and fork do not mix)")
def test_a_forked_worker_killed_by_the_kernel_reads_as_killed(tmp_path, monkeypatch):
    forked: list[object] = []
    real = zygote.fork_worker

    def spy(job, env, procs):
        made = real(job, env, procs)
        forked.append(made)
        return made

    monkeypatch.setattr(zygote, "fork_worker", spy)
    zygote.expect(2)  # fork this one, not only a second run of its environment
    out = tmp_path / "run.json"
    result = invoke_cli(
        "run",
        *TINY,
        "--strategy",
        "tests.integration.user_strategies:KillsItself",
        "--json",
        str(out),
        "--no-progress",
        isolated=True,
    )
    assert forked and forked[0] is not None  # the worker came from the zygote
    assert result.exit_code == 1, result.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["outcome"]["kind"] == "killed", run["outcome"]
    assert run["outcome"]["detail"].startswith("SIGKILL"), run["outcome"]
    assert (run["outcome"]["cycle"], run["outcome"]["phase"]) == (0, "offload")
    assert [p["phase"] for c in run["cycles"] for p in c["phases"]] == ["train"]


@pytest.mark.skipif(has_gpu(), reason="a GPU host forks no worker (CUDA and fork do not mix)")
def test_a_worker_whose_zygote_ends_under_it_is_not_blamed_on_the_strategy(tmp_path):
    """The kernel's OOM killer may pick the zygote (some 300 MB): its workers die with it
    (PR_SET_PDEATHSIG). The row says so, not that the strategy was killed."""
    import signal
    import threading
    import time

    earlier = {id(made): len(made._started) for made in zygote.running()}

    def kill_the_zygote() -> None:
        """Once this test's worker is in its offload (however loaded the host is)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for made in zygote.running():
                for pid in made._started[earlier.get(id(made), 0) :]:  # this test's worker
                    mark = started_mark(pid)
                    if mark.exists():
                        made.proc.send_signal(signal.SIGKILL)
                        mark.unlink()
                        return
            time.sleep(0.05)

    zygote.expect(2)
    killer = threading.Thread(target=kill_the_zygote, daemon=True)
    killer.start()
    out = tmp_path / "run.json"
    result = invoke_cli(
        "run",
        *TINY,
        "--strategy",
        "tests.integration.user_strategies:SleepsInOffload",
        "--json",
        str(out),
        "--no-progress",
        isolated=True,
    )
    killer.join(timeout=5)
    assert result.exit_code == 1, result.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["outcome"]["kind"] == "killed", run["outcome"]
    assert "zygote" in run["outcome"]["detail"], run["outcome"]
    assert run["outcome"]["phase"] == "offload", run["outcome"]
