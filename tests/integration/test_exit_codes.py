"""Exit codes mean one thing in every verb: 0 only when every row is ok and within
budget, 1 when any row crashed, was killed, corrupted data, did not offload, ran out of
memory, broke a budget or contradicted a scenario, 2 for bad input.

In process (``offloadprobe.cli.main``) on a tiny model: what is tested here is the
verdict and the exit code, not process isolation (test_compare_cpu covers real children).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from offloadprobe.core.job import WorkerResult
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import Report, ResidencyFact
from offloadprobe.core.verdicts import judge
from tests.conftest import TINY
from tests.fakes import install_child
from tests.unit.test_budgets import run as fake_run

USER = "tests.integration.user_strategies:"


@pytest.mark.parametrize(
    ("strategy", "budget", "code", "kind", "words"),
    [
        ("lazy", "1.5x", 0, "ok", "ok"),
        ("naive", "1.5x", 1, "over budget", "over budget: host peak "),
        (USER + "FlipsOneBit", None, 1, "corrupted", "param_data differs"),
        (USER + "SkipsOffload", None, 1, "not offloaded", "param_data 2.52 MiB still on device"),
        (USER + "RaisesInLoad", None, 1, "crashed", "RuntimeError: load lost its host copy"),
        (USER + "OutOfMemoryInOffload", None, 1, "out of memory", "Tried to allocate 2.00 GiB"),
    ],
)
def test_run_exit_code_and_verdict(invoke, tmp_path, strategy, budget, code, kind, words):
    out = tmp_path / "r.json"
    args = ["run", "--strategy", strategy, *TINY, "--no-progress", "--json", str(out)]
    rc, stdout, stderr = invoke(*args, *(["--max-host-peak", budget] if budget else []))
    assert rc == code, stderr
    # the JSON is written in every outcome, with the row's verdict and the stable keys
    doc = json.loads(out.read_text())
    assert {"schema_version", "device", "emulated", "payload_bytes", "versions"} <= set(doc)
    (entry,) = doc["runs"]
    assert entry["outcome"]["kind"] == kind and words in entry["verdict"]
    flat = " ".join(stdout.split())
    assert flat.startswith(f"{entry['label']}: {kind}")
    assert " ".join(entry["verdict"].removeprefix(f"{kind}: ").split()) in flat
    if code:
        assert stderr.strip().splitlines()[-1].startswith(f"offloadprobe: error: {strategy} + ")
    if kind == "out of memory":  # an OOM in a phase names the phase and the cycle
        assert (entry["outcome"]["phase"], entry["outcome"]["cycle"]) == ("offload", 0)


def test_judged_rollout_oom_is_a_verdict(invoke, tmp_path):
    out = tmp_path / "rollout.json"
    rc, _, stderr = invoke(
        "run",
        "--strategy",
        "none",
        *TINY,
        "--no-progress",
        "--rollout-claim",
        "1GiB",
        "--gpu-limit",
        "1GiB",
        "--json",
        str(out),
    )
    outcome = json.loads(out.read_text())["runs"][0]["outcome"]
    assert rc == 1, stderr
    assert (outcome["kind"], outcome["phase"]) == ("out of memory", "rollout")


def test_a_run_that_cannot_fit_is_refused_before_it_starts(invoke, monkeypatch):
    from offloadprobe.cli import fit

    monkeypatch.setattr(fit, "available_host_bytes", lambda: (2 * 2**30, "fake cgroup limit"))
    rc, stdout, stderr = invoke("run", "--payload", "1GiB", "--device", "cpu")
    assert rc == 2 and stdout == ""
    (line,) = stderr.strip().splitlines()
    assert "needs about 12." in line and "GiB of host memory" in line
    assert "fake cgroup limit" in line and "--force" in line
    largest = line.split("the largest payload that fits is about ")[1].split(":")[0]
    assert largest.endswith("MiB") and 50 < float(largest.split()[0]) < 100


def test_force_runs_anyway(invoke, monkeypatch, fake_runner):
    from offloadprobe.cli import fit

    monkeypatch.setattr(fit, "available_host_bytes", lambda: (1, "fake"))
    rc, _, stderr = invoke("run", "--strategy", "lazy", *TINY, "--no-progress")
    assert rc == 2 and fake_runner.configs == []  # refused: 1 byte fits nothing
    rc, _, stderr = invoke("run", "--strategy", "lazy", *TINY, "--no-progress", "--force")
    assert rc == 0, stderr
    assert [c.strategy for c in fake_runner.configs] == ["lazy"]  # the run was started


# -- compare: the parent's judgement over canned children ----------------------------


def _report(record) -> dict:
    report = Report(
        device="cpu",
        emulated=True,
        emulation_note="CPU emulation",
        payload_bytes=record.payload_bytes,
        versions={"torch": "x"},
        machine={},
        model={},
        settings={"strategy": record.strategy},
        runs=[record],
    )
    return report.to_dict()


def _children(monkeypatch, outcomes: dict) -> None:
    """Each worker answered by ``outcomes[strategy](job)``: no process is started."""
    install_child(monkeypatch, lambda job, spec: outcomes[job.config.strategy](job))


def _killed(strategy: str):
    def worker(job):
        return -9, ""  # SIGKILL before it wrote its record

    return worker


def _ok(strategy: str, **changes):
    record = dataclasses.replace(fake_run(strategy, peak_x=1.0), **changes)

    def worker(job):
        code = judge(record)[0].exit_code
        WorkerResult(exit_code=code, report=_report(record)).write(job.result_path(None))
        return code, ""

    return worker


COMPARE = ["compare", "--device", "cpu", "--payload", "16MiB", "--force"]
STUCK = ResidencyFact(
    cycle=0,
    param_bytes_to_move=2**30,
    param_bytes_left=2**30,
    param_offload_gave_bytes=0,
    built_on_device_bytes=0,
    moves_optimizer=False,
    optimizer_state_bytes=0,
    optimizer_moved_bytes=0,
)


def test_compare_every_child_killed_exits_1_with_stable_json(invoke, monkeypatch, tmp_path):
    _children(monkeypatch, {s: _killed(s) for s in ("naive", "lazy")})
    out = tmp_path / "c.json"
    rc, _, stderr = invoke(*COMPARE, "naive", "lazy", "--max-host-peak", "1.7x", "--json", str(out))
    assert rc == 1
    assert "2 of 2 rows failed: naive + none (killed), lazy + none (killed)" in stderr
    doc = json.loads(out.read_text())
    assert doc["schema_version"] >= 3 and doc["device"] == "cpu" and doc["emulated"] is True
    assert doc["payload_bytes"] > 15 * 2**20 and doc["versions"]["torch"]
    assert [r["verdict"].split(",")[0] for r in doc["runs"]] == ["killed: SIGKILL"] * 2
    assert [r["exit_code"] for r in doc["runs"]] == [1, 1]


@pytest.mark.parametrize(
    ("changes", "kind", "words"),
    [
        ({}, "ok", "ok"),
        ({"integrity": ["cycle 0, buffer 0: param_data differs"]}, "corrupted", "differs"),
        ({"residency": [STUCK]}, "not offloaded", "still on device"),
        (
            {
                "summary": None,
                "failure": Failure(
                    kind="out of memory", message="CUDA out of memory", cycle=1, phase="load"
                ),
            },
            "out of memory",
            "cycle 1, phase load",
        ),
    ],
)
def test_compare_row_verdicts(invoke, monkeypatch, tmp_path, changes, kind, words):
    _children(monkeypatch, {"lazy": _ok("lazy"), "registered": _ok("registered", **changes)})
    md = tmp_path / "c.md"
    rc, _, stderr = invoke(*COMPARE, "lazy", "registered", "--markdown", str(md))
    assert rc == (0 if kind == "ok" else 1), stderr
    row = next(line for line in md.read_text().splitlines() if "registered + none" in line)
    verdict = row.rstrip(" |").rsplit("| ", 1)[1]
    assert verdict.startswith(kind) and words in verdict


def test_compare_over_budget_names_the_row(invoke, monkeypatch, tmp_path):
    naive = dataclasses.replace(fake_run("naive", peak_x=4.2))

    def over(job):
        WorkerResult(exit_code=0, report=_report(naive)).write(job.result_path(None))
        return 0, ""

    _children(monkeypatch, {"naive": over, "lazy": _ok("lazy")})
    md = tmp_path / "c.md"
    rc, _, stderr = invoke(
        *COMPARE, "naive", "lazy", "--max-host-peak", "1.7x", "--markdown", str(md)
    )
    assert rc == 1
    assert (
        stderr.splitlines()[-1]
        == "offloadprobe: error: naive + none: over budget (--max-host-peak)"
    )
    assert "| over budget: host peak 4.20x > 1.70x |" in md.read_text()
    assert "| lazy + none |" in md.read_text() and md.read_text().count("| ok |") == 1


# -- plan and the strategy spec --------------------------------------------------------


def test_plan_contradicting_the_scenario_exits_1(invoke, tmp_path):
    from tests.conftest import ROOT

    text = (ROOT / "scenarios/ci-small.toml").read_text().replace('naive = "oom"', 'naive = "ok"')
    scenario = tmp_path / "wrong.toml"
    scenario.write_text(text)
    rc, stdout, stderr = invoke("plan", str(scenario), "--no-terms")
    assert rc == 1 and "OOM, EXPECTED ok" in stdout
    assert "naive projected oom, the scenario expects ok" in stderr


def test_plan_agreeing_with_the_scenario_exits_0(invoke):
    from tests.conftest import ROOT

    rc, _, stderr = invoke("plan", str(ROOT / "scenarios/ci-small.toml"), "--no-terms")
    assert rc == 0, stderr


def test_dot_instead_of_colon_gets_a_hint(invoke):
    rc, _, stderr = invoke("run", "--strategy", "mymod.Offload", "--device", "cpu")
    assert rc == 2
    assert "did you mean mymod:Offload?" in stderr


# -- repro: the scenario's expectation against what was observed ------------------------


@pytest.mark.parametrize(
    ("observed", "code"),
    [(("oom", "ok"), 0), (("ok", "ok"), 1), (("oom", "error"), 1), (("error", "ok"), 1)],
)
def test_repro_exit_code(invoke, monkeypatch, observed, code):
    from offloadprobe.repro import reproduce as repro_module
    from offloadprobe.repro.records import Repro, ReproOutcome
    from tests.conftest import ROOT

    outcomes = [
        ReproOutcome(strategy=s, kind="params", expected=e, observed=o, detail=o, method="fake")
        for s, e, o in zip(("naive", "lazy"), ("oom", "ok"), observed, strict=True)
    ]
    fake = Repro(
        scenario="ci-small",
        path="ci-small.toml",
        device="cpu",
        emulated=True,
        model={},
        scale="1",
        outcomes=outcomes,
    )
    monkeypatch.setattr(repro_module, "reproduce", lambda *a, **k: fake)
    rc, _, stderr = invoke("repro", str(ROOT / "scenarios/ci-small.toml"), "--device", "cpu")
    assert rc == code, stderr


# -- the pytest plugin: the same verdicts fail the test -------------------------------


@pytest.mark.parametrize(
    ("outcome", "words"),
    [
        (_killed("lazy"), "lazy + none: killed: SIGKILL"),
        (
            _ok("lazy", residency=[STUCK]),
            "lazy + none: not offloaded: param_data 1.00 GiB still on device",
        ),
        (_ok("lazy", integrity=["param_data differs"]), "lazy + none: corrupted: param_data"),
        (
            _ok(
                "lazy",
                summary=None,
                failure=Failure(
                    kind="crashed", message="RuntimeError: boom", cycle=0, phase="load"
                ),
            ),
            "lazy + none: crashed: RuntimeError: boom (cycle 0, phase load)",
        ),
        (
            _ok("lazy", summary=fake_run(peak_x=3.0).summary),
            "lazy + none: over budget: host peak 3.00x > 1.10x",
        ),
    ],
)
def test_plugin_fails_on_every_verdict_but_ok(monkeypatch, outcome, words):
    from offloadprobe.pytest_plugin.plugin import probe

    install_child(monkeypatch, lambda job, spec: outcome(job))
    try:
        _, failure = probe(strategy="lazy", max_host_peak="1.1x")
    except pytest.fail.Exception as exc:
        reason = str(exc)
    else:
        assert failure is not None
        reason = failure.reason
    assert reason.startswith(words)


def test_plugin_passes_an_ok_row(monkeypatch):
    from offloadprobe.pytest_plugin.plugin import probe

    install_child(monkeypatch, lambda job, spec: _ok("lazy")(job))
    run, failure = probe(strategy="lazy", max_host_peak="1.1x")
    assert failure is None and run.summary.host_peak_x == 1.0
