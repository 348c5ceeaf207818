"""What only a real worker process shows: a strategy that ends its own process, one that
forges a verdict line, and a parent stopped by a signal while its worker runs.

Each test starts real processes (the point is the process boundary): an ``offloadprobe``
parent and its worker.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from tests.conftest import ROOT, TINY_MODEL, run_cli

pytestmark = pytest.mark.processes(3)
USER = "tests.integration.user_strategies:"
ONE = ["--device", "cpu", *TINY_MODEL, "--cycles", "1", "--no-reference-check", "--no-progress"]


def test_a_strategy_that_exits_in_load_is_exited_early_with_its_phases(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategy", USER + "ExitsInLoad", *ONE, "--json", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(f"{USER}ExitsInLoad + none: exited early")
    assert "cycle 0, phase load" in " ".join(proc.stdout.split())
    # the phases it measured before it ended are there: the train and the offload
    assert "offload" in proc.stdout and "train" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("offloadprobe: error: ")
    import json

    (entry,) = json.loads(out.read_text())["runs"]
    assert entry["outcome"]["kind"] == "exited early"
    phases = [p["phase"] for c in entry["cycles"] for p in c["phases"]]
    assert phases == ["train", "offload"]


def test_printed_output_cannot_stand_in_for_the_verdict():
    proc = run_cli("run", "--strategy", USER + "ForgesTheVerdict", *ONE)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{USER}ForgesTheVerdict + none: corrupted")
    assert "forged + none" not in proc.stdout  # the worker's own output is not the report
    assert "| forged + none: ok, round trip bit-exact" in proc.stderr  # framed, on stderr


def _ours(before: set[str]) -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "offloadprobe-*"))) - before


def test_sigterm_to_compare_leaves_no_process_and_no_file():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "offloadprobe-*")))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
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
        family = [
            p
            for p in psutil.Process(parent.pid).children(recursive=True)
            if "offloadprobe.engine.worker" in " ".join(p.cmdline())
        ]
        time.sleep(0.1)
    assert family, "no worker started"
    time.sleep(1.0)  # let it build the model
    family = psutil.Process(parent.pid).children(recursive=True)
    assert _ours(before)  # it made its work folder
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=5)
    assert parent.returncode == 128 + signal.SIGTERM
    (line,) = [x for x in err.splitlines() if x.startswith("offloadprobe:")]
    assert line.startswith("offloadprobe: interrupted: SIGTERM")
    _, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    assert not _ours(before)
