"""``show`` judges a saved row again from its facts, by the budgets the file names, and
never renders a stored outcome its facts contradict (issue 35, point 8).

The records are fakes with exact figures (``tests.fakes``); the truth each test holds the
outcome to is the record's own facts (its residency audit, integrity lines, summary),
judged by the verb's rules, never the ``outcome`` under test."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.verdicts import judge
from tests.fakes import MiB, fake_report, fake_run

OK = asdict(Verdict(kind="ok"))


def _saved(tmp_path, run, *, budgets=(), parsed=()):
    """The run as ``run --json`` writes it, judged honestly (by ``parsed`` budgets)."""
    verdict, _ = judge(run, list(parsed))
    doc = replace(fake_report(run), verdicts=[verdict], budgets=list(budgets)).to_dict()
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(doc))
    return path, doc


def _edited(path, doc, outcome=OK):
    """The same file with its row's outcome rewritten (verdict line, exit code too)."""
    entry = doc["runs"][0]
    entry.update(outcome=outcome, verdict=Verdict(**outcome).line(), exit_code=0)
    entry["not_offloaded"] = []
    path.write_text(json.dumps(doc))
    return path


def _head(stdout: str) -> list[str]:
    """The verdict as ``run`` prints it: its kind, then its detail."""
    return stdout.splitlines()[:2]


def test_an_ok_written_over_parameters_left_on_the_device_is_flagged(invoke, tmp_path):
    # the audit found 8 MiB of param_data still on the device after each offload
    run = fake_run("lazy", left_on_device={"param_data": 8 * MiB})
    path, doc = _saved(tmp_path, run)
    honest = invoke("show", str(path))
    assert honest.exit_code == 0 and honest.error_lines == []
    assert _head(honest.stdout)[0] == "lazy + none: not offloaded"

    edited = invoke("show", str(_edited(path, doc)))
    assert edited.exit_code == 1
    assert edited.stdout == honest.stdout  # shown as its facts judge it, never as ok
    (line,) = edited.error_lines
    assert "row 'lazy + none': its stored outcome 'ok' is not what its facts judge" in line
    assert "'not offloaded: param_data 8.00 MiB still on device after offload'" in line
    as_json = invoke("show", str(path), "--format", "json")  # the record, judged
    assert as_json.exit_code == 1
    (row,) = json.loads(as_json.stdout)["runs"]
    assert row["outcome"]["kind"] == "not offloaded" and row["exit_code"] == 1


def test_an_ok_written_over_a_broken_budget_is_flagged(invoke, tmp_path):
    from offloadprobe.core.budgets import parse_host_peak

    run = fake_run("naive", host_peak_x=3.0)
    path, doc = _saved(
        tmp_path, run, budgets=["--max-host-peak 1.5x"], parsed=[parse_host_peak("1.5x")]
    )
    honest = invoke("show", str(path))
    assert honest.exit_code == 0
    assert _head(honest.stdout) == ["naive + none: over budget", "host peak 3.00x > 1.50x"]

    edited = invoke("show", str(_edited(path, doc)))
    assert edited.exit_code == 1 and edited.stdout == honest.stdout
    assert "its facts judge, 'over budget: host peak 3.00x > 1.50x'" in edited.error_lines[0]


def test_an_ok_written_over_a_corruption_in_a_comparison_is_flagged(invoke, tmp_path):
    """A comparison's row and a canary row: the corrupted row edited to ok is flagged; the
    canary that expected its corruption keeps its stored (and judged) verdict."""
    from offloadprobe.compare.comparison import Candidate, Comparison, ComparisonRow
    from offloadprobe.core.verdicts import expecting

    broken = fake_run("lazy", integrity=["param_data differs after the round trip (cycle 0)"])
    canary = fake_run("naive", integrity=["param_data differs after the round trip (cycle 0)"])
    rows = [
        ComparisonRow(candidate=Candidate(strategy="lazy"), run=broken, verdict=judge(broken)[0]),
        ComparisonRow(
            candidate=Candidate(strategy="naive", expect="corrupted"),
            run=canary,
            verdict=expecting(judge(canary)[0], "corrupted"),
        ),
    ]
    environment = {k: v for k, v in fake_report(broken).to_dict().items() if k != "runs"}
    environment.pop("kind"), environment.pop("budgets"), environment.pop("schema_version")
    doc = Comparison(rows=rows, baseline="lazy + none", environment=environment).to_dict()
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    honest = invoke("show", str(path))
    assert honest.exit_code == 0, honest.stderr

    doc["runs"][0].update(outcome=OK, verdict="ok", exit_code=0)
    path.write_text(json.dumps(doc))
    edited = invoke("show", str(path))
    assert edited.exit_code == 1 and edited.stdout == honest.stdout
    (line,) = edited.error_lines
    assert "row 'lazy + none'" in line and "'corrupted: param_data differs" in line


def test_a_failure_written_over_healthy_facts_is_flagged_too(invoke, tmp_path):
    path, doc = _saved(tmp_path, fake_run("lazy"))
    corrupted = asdict(Verdict(kind="corrupted", detail="param_data differs"))
    edited = invoke("show", str(_edited(path, doc, corrupted)))
    assert edited.exit_code == 1
    assert _head(edited.stdout)[0] == "lazy + none: ok, round trip bit-exact"
    assert "stored outcome 'corrupted: param_data differs'" in edited.error_lines[0]


def test_a_regression_gate_s_verdict_is_kept_as_stored(invoke, tmp_path):
    """The stored baseline is another file: its ``regressed`` holds over facts that pass
    every rule the record carries (it only ever makes a row stricter)."""
    path, doc = _saved(tmp_path, fake_run("lazy"))
    regressed = asdict(Verdict(kind="regressed", detail="host peak 48.00 MiB vs 24.00 MiB"))
    doc["budgets"] = ["--baseline-json base.json", "--max-increase 5%"]
    shown = invoke("show", str(_edited(path, doc, regressed)))
    assert shown.exit_code == 0, shown.stderr
    assert _head(shown.stdout) == ["lazy + none: regressed", "host peak 48.00 MiB vs 24.00 MiB"]


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("summary", "host_peak_x"), float("nan"), "summary.host_peak_x is nan"),
        (
            ("residency", 0, "param_bytes_left"),
            float("inf"),
            "residency[0].param_bytes_left is inf",
        ),
    ],
)
def test_a_figure_no_record_holds_is_bad_input_before_anything_is_shown(
    invoke, tmp_path, where, value, says
):
    path, doc = _saved(tmp_path, fake_run("lazy"))
    target = doc["runs"][0]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path.write_text(json.dumps(doc))  # NaN and Infinity, as Python's json writes them
    shown = invoke("show", str(path))
    assert shown.exit_code == 2 and shown.stdout == ""
    (line,) = shown.error_lines
    assert f"row 'lazy + none': {says}" in line and "Traceback" not in shown.stderr


def test_a_budget_no_verb_sets_is_bad_input(invoke, tmp_path):
    path, doc = _saved(tmp_path, fake_run("lazy"))
    doc["budgets"] = ["--max-host-peek 1.5x"]
    path.write_text(json.dumps(doc))
    shown = invoke("show", str(path))
    assert shown.exit_code == 2 and shown.stdout == ""
    assert "budget '--max-host-peek 1.5x' is not one offloadprobe sets" in shown.error_lines[0]


def test_how_the_worker_ended_is_in_the_record_so_show_agrees(invoke, monkeypatch, tmp_path):
    """The parent's last word (a worker that exited otherwise than its record says:
    ``inconsistent``) goes into the row's record: judged again, the row is what the verb
    said, and ``show`` exits 0."""
    from tests.conftest import TINY
    from tests.fakes import FakeChild, install_child

    class ExitsOtherwise(FakeChild):
        def __call__(self, job, spec):
            super().__call__(job, spec)  # its record says it exits 0
            return 3, ""

    install_child(monkeypatch, ExitsOtherwise())
    out = tmp_path / "c.json"
    verb = invoke("compare", "lazy", "--device", "cpu", *TINY[2:], "--force", "--json", str(out))
    assert verb.exit_code == 1, verb.stderr
    from offloadprobe.schemas import validate

    doc = json.loads(out.read_text())
    validate(doc)  # the compare schema takes the failure record as it stands
    (row,) = doc["runs"]
    assert row["outcome"]["kind"] == "inconsistent"
    assert row["failure_record"]["kind"] == "inconsistent"
    shown = invoke("show", str(out))
    assert shown.exit_code == 0 and shown.error_lines == [], shown.stderr
    assert shown.stdout == verb.stdout
