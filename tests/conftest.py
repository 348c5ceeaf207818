"""Shared fixtures: run the CLI as users do, and skip GPU tests without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# A tiny model (2.5 MiB of parameters) for in-process tests of verdicts and exit codes.
TINY = ["--device", "cpu", "--layers", "1", "--hidden", "256", "--heads", "4", "--vocab",
        "1024", "--seq-length", "32", "--micro-batch", "1", "--cycles", "1",
        "--no-reference-check"]  # fmt: skip
# A small model that still moves tens of MiB, so host effects stand far above noise.
SMALL_MODEL = ["--layers", "2", "--payload", "48MiB", "--seq-length", "32", "--micro-batch", "1"]


@pytest.fixture
def invoke(capsys, monkeypatch):
    """Run the CLI in this process (``offloadprobe.cli.main``); return (exit code, stdout,
    stderr). For tests of verdicts and exit codes, where process isolation is not the point."""
    from offloadprobe.cli import main

    monkeypatch.setenv("COLUMNS", "200")

    def go(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err

    return go


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 300):
    """Run ``python -m offloadprobe ARGS`` in a fresh process, as a user would."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "120", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "offloadprobe", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def run_json(tmp_path):
    """Run one strategy through the CLI and return its parsed JSON report."""

    def go(*args: str, device: str = "cpu") -> dict:
        out = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
        proc = run_cli("run", "--device", device, "--json", str(out), "--no-progress", *args)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        return json.loads(out.read_text())

    return go


def run_each(tmp_dir: Path, specs, *args: str, timeout: int = 600) -> dict:
    """``offloadprobe run ARGS --strategy S --json`` per spec, each in a fresh process.

    Returns ``{spec: (report dict, stdout)}``; any failing run fails the caller.
    """
    out = {}
    for index, spec in enumerate(specs):
        path = tmp_dir / f"run-{index}.json"
        proc = run_cli("run", "--strategy", spec, "--no-progress", "--json", str(path), *args,
                       timeout=timeout)  # fmt: skip
        assert proc.returncode == 0, proc.stderr + proc.stdout
        out[spec] = (json.loads(path.read_text()), proc.stdout)
    return out
