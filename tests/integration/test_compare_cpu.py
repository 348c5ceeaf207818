"""`offloadprobe compare` driven through the CLI, each strategy in a real child process."""

import json

import pytest

from tests.conftest import SMALL_MODEL


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="module")
def compared(compare_dir):
    from tests.conftest import run_cli

    out = compare_dir
    proc = run_cli(
        "compare", "naive", "lazy", "tests.integration.user_strategies:KillsItself",
        "--device", "cpu", "--cycles", "2", *SMALL_MODEL,
        "--json", str(out / "c.json"), "--markdown", str(out / "c.md"),
        "--max-host-peak", "1.5x", "--trace", str(out / "t.json"),
    )  # fmt: skip
    return proc, json.loads((out / "c.json").read_text()), (out / "c.md").read_text()


def test_trace_has_one_process_per_row(compared, compare_dir):
    from offloadprobe.report.trace_format import validate

    _, doc, _ = compared
    trace_path = compare_dir / "t.json"
    trace = json.loads(trace_path.read_text())
    assert validate(trace) == []
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}  # fmt: skip
    assert names == {i: r["label"] for i, r in enumerate(doc["runs"])}
    for pid in (0, 1):
        slices = [(e["args"]["cycle"], e["name"]) for e in trace["traceEvents"]
                  if e["ph"] == "X" and e["pid"] == pid]  # fmt: skip
        assert slices == [(c["cycle"], p["phase"]) for c in doc["runs"][pid]["cycles"]
                          for p in c["phases"]]  # fmt: skip
    # The killed child left no timeline: its track is named and the trace says why it is empty.
    assert not [e for e in trace["traceEvents"] if e["pid"] == 2 and e["ph"] != "M"]
    assert trace["otherData"]["no timeline"] == [doc["runs"][2]["label"]]


def test_naive_breaks_the_budget_lazy_keeps(compared):
    proc, _, _ = compared
    assert proc.returncode == 1, proc.stderr
    breaches = [line for line in proc.stderr.splitlines() if line.startswith("budget exceeded")]
    assert len(breaches) == 1, proc.stderr
    assert breaches[0].startswith("budget exceeded: naive: --max-host-peak: host peak ")
    assert breaches[0].endswith("payload > limit 1.50x")


def test_killed_child_is_a_row_not_a_crash(compared):
    proc, doc, _ = compared
    assert "Traceback" not in proc.stderr
    killed = doc["runs"][2]
    assert killed["label"] == "tests.integration.user_strategies:KillsItself"
    assert killed["exit_code"] == -9
    assert killed["verdict"].startswith("killed by SIGKILL")
    assert killed["summary"] is None


def test_json_has_one_entry_per_strategy_in_the_run_schema(compared):
    _, doc, _ = compared
    assert doc["schema_version"] == 1 and doc["device"] == "cpu" and doc["emulated"] is True
    assert [r["label"] for r in doc["runs"]][:2] == ["naive", "lazy"]
    assert doc["baseline"] == "naive"
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
    assert body[2][-1].startswith("killed by SIGKILL")


def test_unknown_baseline_is_bad_input(cli):
    proc = cli("compare", "naive", "lazy", "--baseline", "registered", "--device", "cpu")
    assert proc.returncode == 2
    assert "--baseline 'registered' is not one of the compared rows" in proc.stderr
