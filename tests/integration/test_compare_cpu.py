"""`offloadprobe compare`, each strategy in a real child.

Process isolation is what compare adds, so its children run for real, two of them: one
that breaks the budget and one killed by SIGKILL mid-offload. The parent, which only
judges and reports, runs in this process through the CLI's entry point. Flag handling
before any child starts is tested in-process (test_cli_errors.py).
"""

import json

import pytest

pytestmark = pytest.mark.processes(2)  # compare's two children

KILLED = "tests.integration.user_strategies:KillsItself"
MODEL = ["--layers", "1", "--payload", "4MiB", "--seq-length", "32", "--micro-batch", "1"]
"""naive peaks at about 3x: at 4 MiB its 1.8x bound and the 1.5x budget are MiB above noise."""


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="module")
def compared(compare_dir):
    from tests.conftest import invoke_cli

    out = compare_dir
    result = invoke_cli(
        "compare",
        "naive",
        KILLED,
        "--device",
        "cpu",
        "--cycles",
        "2",
        "--train-steps",
        "0",
        "--no-reference-check",
        *MODEL,
        "--json",
        str(out / "c.json"),
        "--markdown",
        str(out / "c.md"),
        "--max-host-peak",
        "1.5x",
        "--trace",
        str(out / "t.json"),
        isolated=True,
    )
    return result, json.loads((out / "c.json").read_text()), (out / "c.md").read_text()


def test_trace_has_one_process_per_row(compared, compare_dir):
    from offloadprobe.report.trace_format import validate

    _, doc, _ = compared
    trace = json.loads((compare_dir / "t.json").read_text())
    assert validate(trace) == []
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {i: r["label"] for i, r in enumerate(doc["runs"])}
    slices = [
        (e["args"]["cycle"], e["name"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] == 0 and e["cat"] == "phase"
    ]
    # the strategies' construction is measured first, as its own slice
    assert slices == [(0, "construction")] + [
        (c["cycle"], p["phase"]) for c in doc["runs"][0]["cycles"] for p in c["phases"]
    ]
    # The killed child left no timeline: its track is named and the trace says why it is empty.
    assert not [e for e in trace["traceEvents"] if e["pid"] == 1 and e["ph"] != "M"]
    assert trace["otherData"]["no timeline"] == [doc["runs"][1]["label"]]


def test_show_draws_the_plot_again_from_the_trace_and_the_records(compared, compare_dir):
    from tests.conftest import invoke_cli

    png = compare_dir / "again.png"
    args = [str(compare_dir / "c.json"), "--trace", str(compare_dir / "t.json")]
    result = invoke_cli("show", *args, "--plot", str(png))
    assert result.exit_code == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert f"wrote plot {png}" in result.stderr
    alone = invoke_cli("show", *args)  # a trace without a plot to draw
    assert alone.exit_code == 2 and "--trace and --plot go together" in alone.stderr


def test_show_refuses_a_trace_of_another_run_with_the_same_labels(compared, compare_dir):
    """The same strategies' trace from another compare (here: one cycle more, a payload
    twice as large) would draw this result's exact figures over another run's samples."""
    from tests.conftest import invoke_cli

    trace = json.loads((compare_dir / "t.json").read_text())
    for event in trace["traceEvents"]:
        if event.get("ph") == "X" and "cycle" in event.get("args", {}):
            event["args"]["cycle"] += 1  # the spans of a run with other cycles
    trace["otherData"]["payload_bytes"] *= 2
    other = compare_dir / "other-run.json"
    other.write_text(json.dumps(trace))
    png = compare_dir / "mixed.png"
    args = [str(compare_dir / "c.json"), "--trace", str(other), "--plot", str(png)]
    result = invoke_cli("show", *args)
    assert result.exit_code == 2, result.stderr
    assert not png.exists()


def test_naive_breaks_the_budget(compared):
    result, _, _ = compared
    assert result.exit_code == 1, result.stderr
    # the breach is printed once, in the table's note; stderr names the row and its verdict
    (note,) = [line for line in result.stdout.splitlines() if "x > 1.50x" in line]
    assert note.startswith("(1) naive + none: over budget: host peak ")
    assert "x > 1.50x" not in result.stderr
    # every failed row is named, and the exit code counts the killed row as well
    assert "2 of 2 rows failed: naive + none (over budget)" in result.stderr


def test_killed_child_is_a_row_not_a_crash(compared):
    result, doc, _ = compared
    assert "Traceback" not in result.stderr
    killed = doc["runs"][1]
    assert killed["label"] == f"{KILLED} + none"
    assert killed["worker_exit_code"] == -9 and killed["exit_code"] == 1
    assert killed["verdict"].startswith("killed: SIGKILL")
    assert killed["outcome"]["kind"] == "killed"
    assert killed["summary"] is None


def test_json_has_one_entry_per_strategy_in_the_run_schema(compared):
    from offloadprobe.schemas import validate

    _, doc, _ = compared
    validate(doc, "compare")  # the shipped JSON Schema, a killed row's entry too
    assert doc["schema_version"] >= 3 and doc["device"] == "cpu" and doc["emulated"] is True
    assert [r["label"] for r in doc["runs"]] == ["naive + none", f"{KILLED} + none"]
    assert doc["baseline"] == "naive + none"
    naive = doc["runs"][0]
    assert naive["verdict"].startswith("over budget: host peak ")
    # a fresh process: naive's own baseline, about 3x payload at its peak in emulation
    assert naive["summary"]["host_peak_x"] >= 1.8
    assert [c["cycle"] for c in naive["cycles"]] == [0, 1]


def test_markdown_table_parses(compared):
    _, doc, md = compared
    rows = [line for line in md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[0] == "strategy" and "host peak" in header and header[-1] == "verdict"
    assert set(rows[1].replace("|", "").split()) == {"---"}
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    assert [b[0] for b in body] == [r["label"] for r in doc["runs"]]
    assert all(len(b) == len(header) for b in body)
    assert body[0][1].startswith(f"{doc['runs'][0]['summary']['host_peak_x']:.2f}x")
    assert body[0][-1].startswith("over budget: host peak ")
    assert body[1][-1].startswith("killed: SIGKILL")
