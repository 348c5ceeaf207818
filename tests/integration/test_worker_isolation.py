"""What only a real worker process shows: a strategy that ends its own process, one that
forges a verdict line, and a parent stopped by a signal while its worker runs.

Each test starts a real worker process (the point is the process boundary). The parent
that reads a worker which ended itself runs in this process (``invoke_cli(...,
isolated=True)``): what it is tested for is what it makes of its worker's end and
output, and a fresh parent would only import torch again for the user's strategy module.
The parent a signal stops is a real process of its own.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, TINY_MODEL, invoke_cli

pytestmark = pytest.mark.processes(2)  # a worker per test (the second parent is torch-free)
USER = "tests.integration.user_strategies:"
ONE = ["--device", "cpu", *TINY_MODEL, "--cycles", "1", "--no-reference-check", "--no-progress"]


def test_a_strategy_that_forges_a_verdict_and_exits_in_load(tmp_path, capfd, monkeypatch):
    """It prints a verdict line of its own, then ends its process with status 0 in the
    middle of a load: the row is exited early, with the phases measured before it, and the
    printed line appears only framed, as the measured process's output. Sampled (a
    trace), its sampler's files go with the worker's folder: none stays where the worker
    would put temporary files. The worker is what a lone ``offloadprobe run`` starts, a
    fresh interpreter (this test session forks every other one from a zygote)."""
    from offloadprobe.isolation import zygote

    monkeypatch.setattr(zygote, "_SESSION", [False])  # a lone run's parent is no session
    monkeypatch.setattr(zygote, "_EXPECTED", [0])  # nor expects rows (an in-process compare's)
    forked: list[object] = []
    real = zygote.fork_worker
    monkeypatch.setattr(zygote, "fork_worker", lambda *a: forked.append(real(*a)) or forked[-1])
    out = tmp_path / "r.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    strategy = USER + "ForgesAndExitsInLoad"
    proc = invoke_cli(
        "run",
        "--strategy",
        strategy,
        *ONE,
        "--train-steps",
        "0",  # the train phase is still recorded, with no step to pay for
        "--json",
        str(out),
        "--trace",
        str(tmp_path / "t.json"),
        env={"TMPDIR": str(scratch)},
        isolated=True,
    )
    assert forked == [None]  # its one worker: a fresh interpreter (supervisor's Popen)
    assert _ours(scratch) == []
    assert proc.exit_code == 1, proc.stderr
    assert proc.stdout.startswith(f"{strategy} + none: exited early")
    assert "cycle 0, phase load" in " ".join(proc.stdout.split())
    assert "offload" in proc.stdout and "train" in proc.stdout  # the phases before it
    assert "forged + none" not in proc.stdout  # the worker's own output is not the report
    # nor does the worker write to the streams it would inherit from this process
    assert "forged + none" not in capfd.readouterr().out
    assert "| forged + none: ok, round trip bit-exact" in proc.stderr  # framed, on stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("offloadprobe: error: ")
    (entry,) = json.loads(out.read_text())["runs"]
    assert entry["outcome"]["kind"] == "exited early"
    assert [p["phase"] for c in entry["cycles"] for p in c["phases"]] == ["train", "offload"]


def _workers(parent: int) -> list[psutil.Process]:
    """The parent's workers: fresh interpreters of the worker module, or processes the
    zygote forked (their parent is the zygote, whose own parent is ``parent``)."""
    found = []
    for proc in psutil.Process(parent).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = " ".join(proc.cmdline())
            forked = "offloadprobe.engine.zygote" in line and proc.ppid() != parent
            if "offloadprobe.engine.worker" in line or forked:
                found.append(proc)
    return found


def _ours(folder) -> list[str]:
    return glob.glob(os.path.join(folder, "offloadprobe-*"))


def test_sigterm_to_compare_leaves_no_process_and_no_file(tmp_path):
    # the parent's temporary files go to a folder of this test's own (other tests make theirs)
    env = {**os.environ, "COLUMNS": "80", "TMPDIR": str(tmp_path)}
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "offloadprobe",
            "compare",
            "lazy",
            "naive",
            "--device",
            "cpu",
            *TINY_MODEL,
            "--cycles",
            "50",
            "--no-reference-check",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    family: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not family:  # wait for its first worker to run
        family = _workers(parent.pid)
        time.sleep(0.1)
    assert family, "no worker started"
    time.sleep(1.0)  # let it build the model
    family = psutil.Process(parent.pid).children(recursive=True)
    assert _ours(tmp_path)  # it made its work folder
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=5)
    assert parent.returncode == 128 + signal.SIGTERM
    (line,) = [x for x in err.splitlines() if x.startswith("offloadprobe:")]
    assert line.startswith("offloadprobe: interrupted: SIGTERM")
    _, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    # torch's compile cache (``torchinductor_USER``) is torch's own: importing torch._dynamo
    # makes it in any process that does (every run does), and it is kept by design
    left = [p for p in tmp_path.iterdir() if not p.name.startswith("torchinductor_")]
    assert not _ours(tmp_path) and not left, left
