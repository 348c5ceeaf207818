"""The GitHub Actions workflow of docs/ci.md, its shell steps run as they stand.

Every ``run:`` step but the install runs under bash with the job's ``env:`` and a GitHub
environment (``GITHUB_STEP_SUMMARY``, ``CI``); ``offloadprobe`` in them is the CLI in this
process (``tests/shell_cli.py``). The job's knobs are set as a user would: the tiny model,
and a row of their own, named. Its compare.json is then the stored run of the regression
gate: once handed over by the step, once held to on the command line (two rows: a seeded
increase, and a rerun of the same code).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

import pytest

from offloadprobe.core.units import format_bytes
from tests.conftest import ROOT, TINY, invoke_cli
from tests.shell_cli import run_script

SPEC = "tests.integration.verl_shaped:offload_megatron_model_to_cpu,load_megatron_model_to_gpu"
NAMED = f"fixed={SPEC}"
"""A user's own function pair, named: the spec alone would split at 80 columns."""
MODEL = [*TINY, "--train-steps", "0"]
"""The tiny model, no train step: what is tested here needs no training."""


@dataclass(frozen=True)
class Workflow:
    env: dict[str, str]
    steps: list[tuple[str, str]]
    """(name, script) of every step that has a ``run:``."""
    uploads: list[str]


def _block(lines: list[str], start: int) -> list[str]:
    """The lines below ``lines[start]`` indented deeper than it (blank lines kept)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    out = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def workflow() -> Workflow:
    text = (ROOT / "docs/ci.md").read_text()
    (yaml,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    lines = yaml.splitlines()
    env: dict[str, str] = {}
    steps: list[tuple[str, str]] = []
    uploads: list[str] = []
    name = ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped == "env:":
            for entry in _block(lines, i):
                key, _, value = entry.strip().partition(": ")
                if entry.strip() and not entry.strip().startswith("#"):
                    env[key] = value
        elif stripped.startswith("- name: "):
            name = stripped.removeprefix("- name: ")
        elif stripped == "run: |":
            body = _block(lines, i)
            width = min(len(b) - len(b.lstrip()) for b in body if b.strip())
            steps.append((name, "\n".join(b[width:] for b in body) + "\n"))
        elif stripped.startswith("path: "):
            uploads.append(stripped.removeprefix("path: "))
    return Workflow(env=env, steps=steps, uploads=uploads)


def run_steps(flow: Workflow, cwd, **env: str):
    """Every ``run:`` step but the install, in order, as the runner would; stops at the
    first that fails (the job would)."""
    results = []
    for name, script in flow.steps:
        if name == "Install":
            continue
        results.append(result := run_script(script, cwd=cwd, env={**flow.env, **env}))
        if result.returncode:
            break
    return results


@pytest.fixture(scope="module")
def flow():
    return workflow()


@pytest.fixture(scope="module")
def job(tmp_path_factory, flow):
    """The job as pasted, on the tiny model, with a row of the user's own."""
    import matplotlib.figure

    where = tmp_path_factory.mktemp("ci")
    summary = where / "step-summary.md"
    summary.write_text("")  # the runner makes the file empty for each step
    drawn: list[str] = []
    real = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):  # what the plot shows, as text
        drawn.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        return real(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", savefig)
        (step,) = run_steps(
            flow,
            where,
            MODEL=shlex.join(MODEL),
            ROWS=f"naive {NAMED}",
            GITHUB_STEP_SUMMARY=str(summary),
            GITHUB_ACTIONS="true",
            CI="true",
        )
    out = where / flow.env["OUT"]
    assert (out / "compare.json").exists(), step.stdout + step.stderr
    doc = json.loads((out / "compare.json").read_text())
    return step, doc, where, drawn


def test_the_install_step_is_the_only_one_left_out(flow):
    names = [name for name, _ in flow.steps]
    assert names == ["Install", "Measure offload memory"]
    install = dict(flow.steps)["Install"]
    assert "pip install" in install and '"offloadprobe[megatron,plot]' in install


def test_the_job_passes_with_its_canary_failing_as_expected(job):
    step, doc, _, _ = job
    assert step.returncode == 0, step.stderr
    ((argv, result),) = step.calls
    assert argv[:3] == ["compare", "naive", NAMED] and result.exit_code == 0
    naive, fixed = doc["runs"]
    assert naive["outcome"]["kind"] == "over budget" and naive["outcome"]["expected"] is True
    assert naive["expect"] == "over budget" and naive["exit_code"] == 0
    assert naive["verdict"].endswith("(as expected)")
    assert fixed["verdict"] == "ok" and fixed["expect"] is None and fixed["exit_code"] == 0
    # every row records the budgets it was held to
    assert naive["budgets"] == fixed["budgets"] == ["--max-host-peak 1.5x"]
    # the table marks the canary, its note gives the verdict once
    row = next(line for line in step.stdout.splitlines() if line.startswith("naive + none"))
    assert row.rstrip().endswith("expected (1)")
    notes = [line for line in step.stdout.splitlines() if "> 1.50x" in line]
    assert len(notes) == 1 and notes[0].startswith("(1) naive + none: over budget: host peak")
    assert "> 1.50x" not in step.stderr


def test_every_uploaded_file_was_written(job, flow):
    _, _, where, _ = job
    (folder,) = flow.uploads
    written = sorted(p.name for p in (where / folder).iterdir())
    assert {"compare.json", "compare.md", "compare.png"} <= set(written)
    assert all((where / folder / name).stat().st_size > 0 for name in written)


def test_the_markdown_report_is_appended_to_the_job_summary(job, flow):
    _, doc, where, _ = job
    text = (where / "step-summary.md").read_text()
    assert text.startswith("### offloadprobe compare\n\n| strategy |")
    table = (where / flow.env["OUT"] / "compare.md").read_text()
    assert table.strip() in text  # the same table as the --markdown file
    rows = [line.split(" | ")[0].strip("| ") for line in text.splitlines()[4:6]]
    assert rows == [r["label"] for r in doc["runs"]] == ["naive + none", "fixed"]


def test_a_named_row_is_its_name_in_every_output(job):
    step, doc, _, drawn = job
    fixed = doc["runs"][1]
    assert (fixed["label"], fixed["name"], fixed["strategy"]) == ("fixed", "fixed", SPEC)
    assert any(t.startswith("fixed") for t in drawn), drawn  # legend and peak labels
    assert not any(SPEC in t for t in drawn)
    # both tables name the row by its name, on one line; the spec appears nowhere
    lines = step.stdout.splitlines()
    assert sum(line.startswith("fixed ") for line in lines) == 2
    assert not any("verl_shaped" in line for line in lines)
    assert max(len(line) for line in lines) <= 80


# ------------------------------------------------------------------ the regression gate


def test_the_job_holds_the_rows_to_the_stored_run_once_it_is_committed(job, flow, tmp_path):
    _, _, where, _ = job
    (where / "ci").mkdir()
    (where / flow.env["BASELINE"]).write_text('{"runs": []}')  # not a stored run
    (step,) = run_steps(flow, where, MODEL=shlex.join(MODEL), ROWS=NAMED, BUDGETS="")
    # the step hands the file over, and compare's exit code (bad input) fails the job
    # before anything runs
    assert step.returncode == 2
    ((argv, result),) = step.calls
    gate = argv[argv.index("--baseline-json") :][:4]
    assert gate == ["--baseline-json", flow.env["BASELINE"], "--max-increase", "5%"]
    assert result.error_lines == [
        f"offloadprobe: error: --baseline-json {flow.env['BASELINE']} has no row with figures "
        "to compare against"
    ]


def test_a_seeded_increase_fails_and_a_rerun_of_the_same_code_passes(job, tmp_path):
    """Two rows of the same code against the job's stored row: one stored as it was
    measured, one with its host figures seeded 10% down (an 11% rise now)."""
    _, doc, _, _ = job
    (fixed,) = [row for row in doc["runs"] if row["label"] == "fixed"]
    seeded = json.loads(json.dumps(fixed))
    for key in ("host_peak_bytes", "steady_host_bytes"):
        seeded["summary"][key] = int(seeded["summary"][key] * 0.9)
    again = {**fixed, "label": "again", "name": "again"}
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps({**doc, "runs": [seeded, again]}))
    out = tmp_path / "rerun.json"
    result = invoke_cli(
        "compare",
        NAMED,
        f"again={SPEC}",
        *MODEL,
        "--no-progress",
        "--baseline-json",
        str(stored),
        "--max-increase",
        "5%",
        "--json",
        str(out),
        columns=80,
    )
    assert result.exit_code == 1
    assert result.error_lines[-1] == "offloadprobe: error: fixed: regressed (--max-increase)"
    rows = {row["label"]: row for row in json.loads(out.read_text())["runs"]}
    assert rows["again"]["verdict"] == "ok", rows["again"]["verdict"]
    assert rows["fixed"]["outcome"]["kind"] == "regressed" and rows["fixed"]["exit_code"] == 1
    assert rows["fixed"]["budgets"] == [f"--baseline-json {stored}", "--max-increase 5%"]
    # the note under the table: this run's figure, the stored one and the change, once
    now, before = rows["fixed"]["summary"]["host_peak_bytes"], seeded["summary"]["host_peak_bytes"]
    change = f"+{(now - before) / before:.1%}"
    note = " ".join(result.stdout.split())
    assert (
        f"(1) fixed: regressed: host peak {format_bytes(now)} vs {format_bytes(before)} "
        f"stored ({change} > +5.0%)" in note
    )
    assert note.count(f"vs {format_bytes(before)} stored") == 1
    assert "stored" not in result.stderr
