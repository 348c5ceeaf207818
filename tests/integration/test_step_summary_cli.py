"""``$GITHUB_STEP_SUMMARY``: run, repro and attach append their Markdown report there
(compare: test_ci_recipe_cpu), on fake records; nothing is measured here."""

from __future__ import annotations

import sys

import pytest

from offloadprobe.report.markdown import repro_markdown
from tests.unit import attach_fakes, reporter_fakes

EARLIER = "an earlier command's summary\n"


@pytest.fixture
def summary(tmp_path):
    path = tmp_path / "summary.md"
    path.write_text(EARLIER)  # a step's summary file holds what earlier commands wrote
    return path


def test_run_appends_its_report(invoke, fake_runner, summary):
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    result = invoke("run", "--device", "cpu", "--no-progress", "--cycles", "1", env=env)
    assert result.exit_code == 0, result.stderr
    text = summary.read_text()
    assert text.startswith(EARLIER + "### offloadprobe run\n\n**lazy + none**: ok")
    assert "| parameters |" in text


def test_repro_appends_its_report(invoke, monkeypatch, summary):
    record = reporter_fakes.repro()
    monkeypatch.setattr("offloadprobe.repro.reproduce.reproduce", lambda s, **kw: record)
    result = invoke("repro", "ci-small", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code in (0, 1), result.stderr  # 1: the fake's outcomes differ
    expected = EARLIER + "### offloadprobe repro\n\n" + repro_markdown(record).rstrip() + "\n\n"
    assert summary.read_text() == expected


def test_attach_appends_its_report(invoke, monkeypatch, summary):
    from offloadprobe.attach.report_markdown import attach_markdown

    record = attach_fakes.job(gpu=False, never=True)
    monkeypatch.setattr("offloadprobe.attach.run.run_attached", lambda job: record)
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    args = ["attach", "--no-cgroup", "--phase", "offload=mymod:offload", "--"]
    result = invoke(*args, sys.executable, "-c", "pass", env=env)
    text = summary.read_text()
    assert text.startswith(EARLIER + "### offloadprobe attach\n\n"), result.stderr
    assert attach_markdown(record).strip() in text


def test_an_unwritable_summary_costs_one_line_not_the_exit_code(invoke, fake_runner, tmp_path):
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path)}  # a folder: cannot be appended to
    result = invoke("run", "--device", "cpu", "--no-progress", "--cycles", "1", env=env)
    assert result.exit_code == 0
    (line,) = [x for x in result.error_lines if "GITHUB_STEP_SUMMARY" in x]
    assert line.startswith(
        f"offloadprobe: warning: cannot append to $GITHUB_STEP_SUMMARY {tmp_path}"
    )
