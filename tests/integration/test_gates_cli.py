"""Canary rows (``compare --expect``) and the regression gate (``--baseline-json``) as a
user drives them: the CLI and the pytest plugin over fake runs (exact figures)."""

from __future__ import annotations

import json

import pytest

from tests.fakes import FakeChild, fake_report, fake_run, install_child

FAST = ["--device", "cpu", "--no-progress", "--cycles", "2", "--payload", "48MiB"]
"""The fake runs' payload (48 MiB): a stored run of them is a run of this model."""


def _stored(tmp_path, **figures) -> str:
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(fake_report(fake_run("lazy", **figures)).to_dict()))
    return str(path)


def test_run_regressed_over_the_stored_run_shows_both_figures_and_the_change(
    invoke, fake_runner, tmp_path
):
    stored = _stored(tmp_path, host_peak_x=1.0)
    fake_runner.runs["lazy"] = dict(host_peak_x=1.2)
    out = tmp_path / "r.json"
    result = invoke(
        "run", *FAST, "--baseline-json", stored, "--max-increase", "5%", "--json", str(out)
    )
    assert result.exit_code == 1
    assert result.stdout.startswith(
        "lazy + none: regressed\nhost peak 57.60 MiB vs 48.00 MiB stored (+20.0% > +5.0%)\n"
    )
    assert result.error_lines == ["offloadprobe: error: lazy + none: regressed (--max-increase)"]
    (row,) = json.loads(out.read_text())["runs"]
    assert row["outcome"]["kind"] == "regressed" and row["exit_code"] == 1


def test_run_within_the_increase_passes_and_a_row_not_stored_is_said_so(
    invoke, fake_runner, tmp_path
):
    stored = _stored(tmp_path, host_peak_x=1.0)
    fake_runner.runs["lazy"] = dict(host_peak_x=1.04)
    ok = invoke("run", *FAST, "--baseline-json", stored, "--max-increase", "5%")
    assert ok.exit_code == 0, ok.stderr
    other = invoke(
        "run", *FAST, "-s", "mine=lazy", "--baseline-json", stored, "--max-increase", "5%"
    )
    assert other.exit_code == 2  # the stored run has none of the rows: another file
    assert "has no row of mine (it has: lazy + none)" in other.stderr


@pytest.mark.parametrize(
    ("expect", "peak_x", "code", "verdict"),
    [
        ("naive=over-budget", 2.0, 0, "over budget: host peak 2.00x > 1.50x (as expected)"),
        ("naive=over-budget", 1.2, 1, "unexpected pass: expected over budget, but every check"),
        ("naive=corrupted", 2.0, 1, "over budget: host peak 2.00x > 1.50x; expected corrupted"),
        ("naive + none=Over_Budget", 2.0, 0, "over budget: host peak 2.00x > 1.50x (as expected)"),
    ],
)
def test_a_canary_row_passes_only_by_failing_as_expected(
    invoke, fake_runner, tmp_path, expect, peak_x, code, verdict
):
    fake_runner.runs["naive"] = dict(host_peak_x=peak_x)
    out = tmp_path / "c.json"
    args = ["compare", "naive", "lazy", *FAST, "--max-host-peak", "1.5x", "--expect", expect]
    result = invoke(*args, "--json", str(out), columns=80)
    assert result.exit_code == code, result.stderr
    naive, lazy = json.loads(out.read_text())["runs"]
    assert naive["verdict"].startswith(verdict) and naive["exit_code"] == code
    assert naive["outcome"]["expected"] is (code == 0)
    assert lazy["expect"] is None and lazy["exit_code"] == 0
    cell = "expected (1)" if code == 0 else f"{naive['outcome']['kind']} (1)"
    row = next(line for line in result.stdout.splitlines() if line.startswith("naive + none"))
    assert row.rstrip().endswith(cell)
    if code:  # a row that broke a budget is named with its flag: the note gave the figures
        said = "over budget (--max-host-peak)" if naive["breaches"] else naive["verdict"]
        assert result.error_lines[-1] == f"offloadprobe: error: naive + none: {said}"


@pytest.mark.parametrize(
    ("expect", "words"),
    [
        ("naive=overbudget", "no verdict 'overbudget'; did you mean over-budget?"),
        ("mine=crashed", "no compared row is 'mine' (naive + none, lazy + none)"),
        ("naive", "give ROW=VERDICT, e.g. naive=over-budget"),
    ],
)
def test_a_bad_expectation_is_bad_input_before_anything_runs(invoke, fake_runner, expect, words):
    result = invoke("compare", "naive", "lazy", *FAST, "--expect", expect)
    assert result.exit_code == 2 and words in result.stderr, result.stderr
    assert fake_runner.configs == []


# ------------------------------------------------------------------ the pytest plugin


def test_the_plugin_takes_the_regression_gate_as_keywords(monkeypatch, tmp_path):
    from offloadprobe.pytest_plugin.plugin import check_options, probe

    child = install_child(monkeypatch, FakeChild())
    child.runs["lazy"] = dict(host_peak_x=1.2)
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps(fake_report(fake_run("lazy", host_peak_x=1.0)).to_dict()))
    gate = dict(baseline_json=stored, max_increase="5%", payload="48MiB")  # the fakes' model
    _, failure = probe(strategy="lazy", device="cpu", **gate)
    assert failure is not None
    assert failure.reason == (
        "lazy + none: regressed: host peak 57.60 MiB vs 48.00 MiB stored (+20.0% > +5.0%)"
    )
    with pytest.raises(pytest.UsageError, match="cannot parse max_increase= '5'"):
        check_options({"baseline_json": str(stored), "max_increase": "5"})


# ------------------------------------------------------------------ named rows


def test_a_named_row_of_run_is_its_name_in_the_report_json_and_trace(invoke, fake_runner, tmp_path):
    spec = "tests.integration.verl_shaped:offload_megatron_model_to_cpu,load_megatron_model_to_gpu"
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    args = ["run", *FAST, "-s", f"fixed={spec}", "--json", str(out), "--trace", str(trace)]
    result = invoke(*args, columns=80)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "fixed: ok, round trip bit-exact"
    assert "fixed: fake" in lines  # the phase table's title: the name, not the spec
    assert not any("verl_shaped" in line for line in lines)
    (row,) = json.loads(out.read_text())["runs"]
    assert (row["label"], row["strategy"]) == ("fixed", spec)
    events = json.loads(trace.read_text())["traceEvents"]
    names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert names == ["fixed"]
