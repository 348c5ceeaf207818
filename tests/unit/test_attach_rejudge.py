"""``show`` of a saved attach result judges it again from its facts and budgets, as it
judges a run's rows: an edited outcome or breach list is caught, an honest file passes,
and a file written before schema 6 still reads."""

from __future__ import annotations

import json

from offloadprobe.attach import verdict
from offloadprobe.attach.report_json import attach_json
from offloadprobe.attach.verdict import Budgets
from tests.conftest import invoke_cli
from tests.unit import attach_fakes as fake


def _saved(tmp_path, doc, name="attach.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _over_budget():
    """offload #2 peaked 64 MiB over its start: over a 40 MiB budget."""
    return verdict.judge(
        fake.job(), Budgets.parse(host_peak="40MiB", host_growth=None, node_peak=None)
    )


def test_an_honest_attach_result_shows_as_written_and_exits_0(tmp_path):
    doc = attach_json(_over_budget())
    assert doc["budgets"] == ["--max-host-peak 40MiB"] and doc["exit_code"] == 1
    assert doc["outcome"]["kind"] == "over budget"
    shown = invoke_cli("show", str(_saved(tmp_path, doc)), columns=80)
    assert shown.exit_code == 0, shown.stderr
    assert "over budget: offload #2 (rank 0): --max-host-peak: host peak 64.00 MiB" in (
        shown.stdout
    )
    as_json = invoke_cli("show", str(_saved(tmp_path, doc)), "--format", "json")
    assert json.loads(as_json.stdout) == json.loads(json.dumps(doc))


def test_an_edited_outcome_or_breach_list_is_judged_from_the_facts_and_exits_1(tmp_path):
    """The file says ok and lists no breach; its calls and its budget say otherwise."""
    doc = attach_json(_over_budget())
    doc.update(breaches=[], outcome={"kind": "ok"}, exit_code=0)
    path = _saved(tmp_path, doc)
    shown = invoke_cli("show", str(path), columns=80)
    assert shown.exit_code == 1
    (line,) = [x for x in shown.stderr.splitlines() if x.startswith("offloadprobe: error:")]
    assert "stored outcome 'ok' is not what its facts judge, 'over budget: offload #2" in line
    assert "host peak 64.00 MiB > 40.00" in shown.stdout
    assert "verdict: over budget (1 breach(es))" in shown.stdout
    judged = json.loads(invoke_cli("show", str(path), "--format", "json").stdout)
    assert judged["outcome"]["kind"] == "over budget" and judged["exit_code"] == 1
    assert [b["strategy"] for b in judged["breaches"]] == ["offload #2 (rank 0)"]


def test_a_failed_job_edited_to_pass_is_caught(tmp_path):
    doc = attach_json(fake.job(exit_code=3))
    doc.update(outcome={"kind": "ok"}, exit_code=0)
    shown = invoke_cli("show", str(_saved(tmp_path, doc)), columns=80)
    assert shown.exit_code == 1 and "'crashed: job exit 3'" in shown.stderr
    exit_only = attach_json(fake.job(exit_code=3))
    exit_only["exit_code"] = 0  # the outcome left as written, the exit code edited
    shown = invoke_cli("show", str(_saved(tmp_path, exit_only, "b.json")), columns=80)
    assert shown.exit_code == 1 and "stored exit code 0 is not what its facts judge, 1" in (
        shown.stderr
    )


def test_a_budget_word_no_attach_flag_is_bad_input_in_one_line(tmp_path):
    doc = attach_json(_over_budget())
    doc["budgets"] = ["--max-host-peak lots"]
    shown = invoke_cli("show", str(_saved(tmp_path, doc)), columns=80)
    assert shown.exit_code == 2 and len(shown.stderr.strip().splitlines()) == 1
    assert "its budgets: cannot parse --max-host-peak 'lots'" in shown.stderr


def test_a_file_of_schema_5_reads_with_its_own_breaches(tmp_path):
    """Before schema 6: attach's own breach keys, no budgets, no outcome, the job's
    status as attach's exit code. It renders; nothing stored contradicts its facts."""
    doc = attach_json(_over_budget())
    for key in ("budgets", "outcome", "interrupted"):
        del doc[key]
    doc.update(
        schema_version=5,
        breaches=[
            {
                "budget": "--max-host-peak 40MiB",
                "value": "64.00 MiB",
                "limit": "40.00 MiB",
                "where": "offload #2 (rank 0)",
            }
        ],
    )
    shown = invoke_cli("show", str(_saved(tmp_path, doc)), columns=120)
    assert shown.exit_code == 0, shown.stderr
    assert "over budget: offload #2 (rank 0): --max-host-peak: 64.00 MiB > 40.00 MiB" in (
        shown.stdout
    )
