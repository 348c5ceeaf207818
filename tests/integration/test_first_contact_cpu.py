"""``make run``: the problem and the fix side by side in the first lines a new user sees.

The Makefile's own recipe, as ``make -n`` expands it on a CPU host, runs under bash at 80
columns with ``offloadprobe`` the CLI in this process (``tests/shell_cli.py``), its model
flags (``--payload``, ``--cycles``) swapped for the tiny model's. What a terminal shows is
make's echo of the command, the progress lines, then the report.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, TINY
from tests.shell_cli import run_script

FIRST_LINES = 15
WIDTH = 80


@pytest.fixture(scope="module")
def make_run(tmp_path_factory):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path_factory.mktemp("venv")
    program = venv / "bin" / "offloadprobe"
    # -o: the environment is taken as made (the recipe is what runs once it exists);
    # HAS_GPU empty: the CPU host's recipe, whatever this host has (the model is on CPU)
    make = ["make", "-s", "-n", "-o", str(program), "run", f"VENV={venv}", "HAS_GPU="]
    recipe = subprocess.run(
        make, cwd=ROOT, capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    ).stdout.strip()
    argv = shlex.split(recipe.replace(str(program), "offloadprobe", 1))
    for flag in ("--payload", "--cycles"):  # the model's size: the tiny one's instead
        del argv[argv.index(flag) : argv.index(flag) + 2]
    command = shlex.join([*argv, *TINY, "--train-steps", "0"])
    result = run_script(command, cwd=ROOT, env={}, columns=WIDTH)
    echoed = recipe.replace(str(program), ".venv/bin/offloadprobe", 1)
    return recipe, echoed, result


def _terminal(echoed: str, result) -> list[str]:
    """The lines a terminal shows: make's echo (wrapped at 80), the progress lines the
    runs print before the report, then the report."""
    ((_, cli),) = result.calls
    before = [line for line in cli.stderr.splitlines() if "running in a fresh process" in line]
    wrapped = [echoed[i : i + WIDTH] for i in range(0, len(echoed), WIDTH)]
    return wrapped + before + cli.stdout.splitlines()


def test_make_run_compares_the_problem_and_the_fix(make_run):
    recipe, _, result = make_run
    argv = shlex.split(recipe)[1:]
    assert argv[:3] == ["compare", "naive", "lazy"]
    assert "--expect" in argv and argv[argv.index("--expect") + 1] == "naive=over-budget"
    assert result.returncode == 0, result.stderr  # naive fails as expected: make succeeds


def test_both_host_multiples_are_in_the_first_15_lines_at_80_columns(make_run):
    _, echoed, result = make_run
    lines = _terminal(echoed, result)
    first = lines[:FIRST_LINES]
    multiple = r"\s+(\d+\.\d\dx) [\d.]+ [KMG]iB"
    naive = [m for line in first if (m := re.match(r"naive \+ none" + multiple, line))]
    lazy = [m for line in first if (m := re.match(r"lazy \+ none" + multiple, line))]
    assert naive and lazy, "\n".join(lines)
    # the problem, the fix: naive holds about three copies, lazy about one
    assert float(naive[0].group(1)[:-1]) > 1.5 > float(lazy[0].group(1)[:-1])
    # and the table says which is the problem
    assert any(line.startswith("(1) naive + none: over budget: host peak ") for line in first)
    assert all(len(line) <= WIDTH for line in lines)
