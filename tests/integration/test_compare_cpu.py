"""`offloadprobe compare` driven through the CLI, each strategy in a real child process."""

import json

import pytest

from tests.conftest import SMALL_MODEL


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("compare")
    proc = run_cli(
        "compare", "naive", "lazy", "tests.integration.user_strategies:KillsItself",
        "--device", "cpu", "--cycles", "2", *SMALL_MODEL,
        "--json", str(out / "c.json"), "--markdown", str(out / "c.md"),
        "--max-host-peak", "1.5x",
    )  # fmt: skip
    return proc, json.loads((out / "c.json").read_text()), (out / "c.md").read_text()


def test_naive_breaks_the_budget_lazy_keeps(compared):
    proc, _, _ = compared
    assert proc.returncode == 1, proc.stderr
    breaches = [line for line in proc.stderr.splitlines() if line.startswith("budget exceeded")]
    assert len(breaches) == 1, proc.stderr
    assert breaches[0].startswith("budget exceeded: naive + none: --max-host-peak: host peak ")
    assert breaches[0].endswith("x > 1.50x")
    # every failed row is named, and the exit code counts the killed row as well
    assert "2 of 3 rows failed: naive + none (over budget)" in proc.stderr


def test_killed_child_is_a_row_not_a_crash(compared):
    proc, doc, _ = compared
    assert "Traceback" not in proc.stderr
    killed = doc["runs"][2]
    assert killed["label"] == "tests.integration.user_strategies:KillsItself + none"
    assert killed["exit_code"] == -9
    assert killed["verdict"].startswith("killed: SIGKILL")
    assert killed["outcome"]["kind"] == "killed"
    assert killed["summary"] is None


def test_json_has_one_entry_per_strategy_in_the_run_schema(compared):
    _, doc, _ = compared
    assert doc["schema_version"] == 2 and doc["device"] == "cpu" and doc["emulated"] is True
    assert [r["label"] for r in doc["runs"]][:2] == ["naive + none", "lazy + none"]
    assert [r["verdict"] for r in doc["runs"]][1] == "ok"
    assert doc["runs"][0]["verdict"].startswith("over budget: host peak ")
    assert doc["baseline"] == "naive + none"
    naive, lazy = doc["runs"][0]["summary"], doc["runs"][1]["summary"]
    assert naive["host_peak_x"] > lazy["host_peak_x"] + 0.6
    assert [c["cycle"] for c in doc["runs"][1]["cycles"]] == [0, 1]


def test_markdown_table_parses(compared):
    _, doc, md = compared
    rows = [line for line in md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[0] == "strategy" and "host peak" in header and header[-1] == "verdict"
    assert set(rows[1].replace("|", "").split()) == {"---"}
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    assert [b[0] for b in body] == [r["label"] for r in doc["runs"]]
    assert all(len(b) == len(header) for b in body)
    assert body[1][1].startswith(f"{doc['runs'][1]['summary']['host_peak_x']:.2f}x")
    assert body[0][-1].startswith("over budget: host peak ")
    assert body[2][-1].startswith("killed: SIGKILL")


def test_unknown_baseline_is_bad_input(cli):
    proc = cli("compare", "naive", "lazy", "--baseline", "registered", "--device", "cpu")
    assert proc.returncode == 2
    assert "--baseline 'registered' is not one of the compared rows" in proc.stderr
