"""``plan --probe --strategy SPEC``: a user's strategy declares no host events, so plan
runs it once on the probe model and replays what that run measured, next to the
built-ins' projections.

One real run in the whole file (the module fixture; its worker a real process, in this
test session forked from the session's zygote): verl's pre-6193 offload functions (a
fresh ``.cpu().pin_memory()`` copy every offload: two host copies alive at once in CPU
emulation, 2x the payload) on the smallest tiny model. A fresh ``plan`` process shows that
plan itself imports no torch, its worker answered by the fake (a real worker is another
process, whatever it imports; the fake's record takes the same path through plan). The
rest are the CLI's logic, in this process, with workers answered by the fake runner (no
model, no torch work).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SUBPROCESS_TIMEOUT, invoke_cli

pytestmark = pytest.mark.processes(1)  # the fixture's worker

PRE_6193 = (
    "tests.integration.verl_shaped:offload_megatron_model_to_cpu_pre6193,load_megatron_model_to_gpu"
)
MODEL = [
    "--device",
    "cpu",
    "--layers",
    "1",
    "--hidden",
    "128",
    "--heads",
    "4",
    "--vocab",
    "512",
    "--seq-length",
    "32",
    "--cycles",
    "1",
]
MEASURED = "measured on the probe (one run)"
USER = "tests.integration.user_strategies:"
PLAN_PRE = ["plan", "--probe", *MODEL, "--strategy", f"pre={PRE_6193}", "--no-progress"]


@pytest.fixture(scope="module")
def pre6193_plan(tmp_path_factory):
    """``plan --probe --strategy pre=PRE_6193`` at 80 columns, its worker a real process
    (sub-MiB host figures in this long-lived process would be its heap's): (stdout, JSON)."""
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    result = invoke_cli(*PLAN_PRE, "--json", str(out), columns=80, isolated=True)
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout, json.loads(out.read_text())


def test_the_plan_process_imports_no_torch(tmp_path):
    out = tmp_path / "plan.json"
    code = (
        "import sys\n"
        "from offloadprobe.cli import main\n"
        "from offloadprobe.isolation import supervisor\n"
        "from tests.fakes import FakeChild\n"
        "supervisor.SPAWNER.insert(0, FakeChild())\n"
        "try:\n"
        f"    main({[*PLAN_PRE, '--json', str(out)]!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
    )
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "80"},
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rpartition("torch imported: ")[2].strip() == "False"
    (row,) = json.loads(out.read_text())["measured"]  # the worker's record, replayed
    assert row["strategy"] == "pre" and row["figures"] == MEASURED


def test_a_user_pair_is_measured_once_with_the_runs_own_figures(pre6193_plan):
    _, doc = pre6193_plan
    (row,) = doc["measured"]
    assert row["strategy"] == "pre" and row["spec"] == PRE_6193
    assert row["figures"] == MEASURED and row["device"] == "cpu"
    assert row["verdict"]["kind"] == "ok", row["verdict"]
    summary = row["summary"]  # what ``run --strategy PRE_6193`` reports of this run
    assert row["peak"] == summary["host_peak_bytes"]
    assert row["steady"] == summary["steady_host_bytes"]
    assert row["pinned"] == summary["pinned_reserved_bytes"]  # None: no pinned memory on CPU
    assert row["payload_bytes"] == doc["payload_bytes"] > 0
    # the replayed events are the run's: the first offload holds two host copies at once
    # The zero is the host before the strategies were built: the first offload starts at
    # what their construction still held, some allocator pages at most (the run's own note
    # names it from 1 MiB on), not at an exact 0 (a 256 KiB arena seen here).
    first = row["phases"][0]
    assert (first["cycle"], first["phase"]) == (0, "offload")
    assert 0 <= first["host_start"] < 2**20, first
    payload = row["payload_bytes"]
    assert 1.6 * payload < first["peak_over_start"] < 2.4 * payload, first
    assert row["peak"] == max(p["host_start"] + p["peak_over_start"] for p in row["phases"])


def test_the_built_ins_stay_projected_next_to_it(pre6193_plan):
    from offloadprobe.core import options as opts
    from offloadprobe.plan.probe import probe_projection

    stdout, doc = pre6193_plan
    rows = {r["strategy"]: r for r in doc["strategies"]}
    assert {r["figures"] for r in rows.values()} == {"projected"}
    model = opts.build_config({"layers": 1, "hidden": 128, "heads": 4, "vocab": 512}).model
    naive = probe_projection(model, "naive", emulated=True, cycles=1)
    assert rows["naive"]["peak"] == naive.peak  # arithmetic, not a run
    lines = {line.split()[0]: line.split() for line in stdout.splitlines() if line.strip()}
    assert lines["naive"][1] == "projected" and lines["pre"][1] == "measured"
    words = " ".join(stdout.split())
    assert f"pre: {MEASURED} of tests.integration" in words  # the spec folds at 80 columns
    assert "in CPU emulation: ok." in words
    assert "hold for this probe's size only; no scaling to other sizes is claimed" in words


# -- the CLI's logic, with the fake runner ------------------------------------------------


def _plan(invoke, tmp_path, *args: str):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--probe", *MODEL, "--no-progress", *args, "--json", str(out))
    return result, (json.loads(out.read_text()) if out.exists() else None)


def test_a_failed_measured_row_carries_its_verdict_and_exits_1(invoke, tmp_path, fake_runner):
    flips, kills = USER + "FlipsOneBit", USER + "KillsItself"  # found, run by the fake
    fake_runner.runs[flips] = dict(integrity=["cycle 0: param_data differs at byte 14"])
    fake_runner.runs[kills] = dict(failure="worker died", failure_kind="crashed")
    result, doc = _plan(invoke, tmp_path, "--strategy", flips, "--strategy", f"b={kills}")
    assert result.exit_code == 1, result.stderr
    kinds = {r["strategy"]: r["verdict"]["kind"] for r in doc["measured"]}
    assert kinds == {flips: "corrupted", "b": "crashed"}
    crashed = next(r for r in doc["measured"] if r["strategy"] == "b")
    assert crashed["peak"] is None and crashed["summary"] is None  # no figures claimed
    assert "measured: corrupted" in result.stdout and "measured: crashed" in result.stdout
    assert "2 of 2 rows failed" in result.stderr


def test_a_fake_run_replays_to_exactly_its_summary(invoke, tmp_path, fake_runner):
    fake_runner.runs["lazy"] = dict(host_peak_x=2.0, steady_x=1.0)
    result, doc = _plan(invoke, tmp_path, "--strategy", "lazy")
    assert result.exit_code == 0, result.stderr
    (row,) = doc["measured"]  # a built-in named by --strategy is measured too
    summary = row["summary"]
    assert (row["peak"], row["steady"]) == (
        summary["host_peak_bytes"],
        summary["steady_host_bytes"],
    )
    assert row["peak"] == 2 * row["payload_bytes"] and row["steady"] == row["payload_bytes"]
    assert fake_runner.last.strategy == "lazy" and fake_runner.last.optimizer_strategy == "none"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--strategy", "lazzy"), "did you mean 'lazy'"),
        (("--strategy", "legacy"), "--optimizer-strategy legacy"),
        (("--strategy", "a=lazy", "--strategy", "a=naive"), "row 'a' is given twice"),
        (("--strategy", "=x:f,g"), "give name=strategy"),
        (("--strategy", "no_such_module:f,g"), "cannot import 'no_such_module'"),
        (("--strategy", "tests.integration.verl_shaped:"), "is not of the form"),
    ],
)
def test_a_bad_spec_is_one_line_exit_2(invoke, tmp_path, fake_runner, args, words):
    result, _ = _plan(invoke, tmp_path, *args)
    assert result.exit_code == 2, result.stderr
    (line,) = result.error_lines
    assert line.startswith("offloadprobe: error: ") and words in line, line
    assert not fake_runner.configs  # nothing ran


def test_strategy_without_probe_is_bad_input(invoke):
    result = invoke("plan", "verl-6193", "--strategy", "x:f,g")
    assert result.exit_code == 2 and "add --probe" in result.stderr


def test_a_saved_probe_plan_reads_back_its_measured_rows():
    from offloadprobe.core.config import ModelConfig
    from offloadprobe.plan.probe import ProbePlan
    from offloadprobe.report.documents import document
    from tests.unit import reporter_fakes as fake

    plan = ProbePlan(
        model=ModelConfig(),
        device="cpu",
        cycles=1,
        payload_bytes=48 * 2**20,
        strategies=tuple(fake.probe_rows()),
        measured=tuple(fake.measured_rows()),
    )
    doc = json.loads(json.dumps(plan.to_dict()))  # exactly what --json writes
    assert [r["figures"] for r in doc["measured"]] == [MEASURED, MEASURED]
    assert document(doc).record.measured == plan.measured


def test_an_unnamed_spec_row_is_not_split_inside_a_name_at_80_columns(tmp_path, fake_runner):
    """A user's spec without name= names its row; at 80 columns the cell may break only
    between the spec's parts (after ':' or ',', shown with a space), never inside a module
    or class name."""
    from tests.conftest import invoke_cli

    spec = USER + "FlipsOneBit"
    fake_runner.runs[spec] = dict(host_peak_x=2.0, steady_x=1.0)
    args = ["plan", "--probe", *MODEL, "--no-progress", "--strategy", spec]
    result = invoke_cli(*args, columns=80)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(spec[:10]))
    pieces: list[str] = []  # the strategy cell, line by line
    for line in lines[start:]:
        if "".join(pieces).replace(" ", "") == spec or not line.strip():
            break
        pieces.append(line.split("  ")[0].strip())
    assert "".join(pieces).replace(" ", "") == spec, pieces
    assert all(piece[-1] in ".:," for piece in pieces[:-1]), pieces
