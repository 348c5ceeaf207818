"""Regression against a stored run and canary expectations, on hand-built records (exact)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from offloadprobe.core.errors import UsageError
from offloadprobe.core.option_budgets import budgets_from_flags
from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.regression import RegressionBudget, check_rows, parse_increase
from offloadprobe.core.verdicts import expecting, judge
from tests.unit.test_budgets import GiB
from tests.unit.test_budgets import run as budget_run

MiB = 2**20


def record(strategy="lazy", *, peak=GiB, steady=GiB, pinned=None, gpu_left=0, payload=GiB):
    base = budget_run(strategy, peak_x=peak / GiB, gpu_left=gpu_left)
    summary = replace(
        base.summary, host_peak_bytes=peak, steady_host_bytes=steady, pinned_reserved_bytes=pinned
    )
    return replace(base, summary=summary, payload_bytes=payload)


def stored(tmp_path, *runs, name="stored.json"):
    """A result file as ``--json`` writes it: the rows with their labels and summaries."""
    from dataclasses import asdict

    path = tmp_path / name
    rows = [
        {"label": r.label, "payload_bytes": r.payload_bytes, "summary": asdict(r.summary)}
        for r in runs
    ]
    path.write_text(json.dumps({"kind": "compare", "runs": rows}))
    return path


def gate(path, limit="5%"):
    (budget,) = budgets_from_flags(None, None, None, baseline_json=str(path), max_increase=limit)
    assert isinstance(budget, RegressionBudget)
    return budget


def test_a_figure_grown_past_the_limit_regresses_with_both_figures_and_the_change(tmp_path):
    budget = gate(stored(tmp_path, record(peak=100 * MiB, steady=64 * MiB, pinned=128 * MiB)))
    now = record(peak=111 * MiB, steady=66 * MiB, pinned=128 * MiB)
    verdict, (breach,) = judge(now, [budget])
    assert verdict.kind == "regressed" and verdict.exit_code == 1
    # steady host grew 3.1%: within 5%, so only the host peak is named
    assert breach.line() == (
        "lazy + none: --max-increase: host peak 111.00 MiB vs 100.00 MiB stored (+11.0% > +5.0%)"
    )


def test_every_figure_is_held_pinned_and_gpu_left_too(tmp_path):
    budget = gate(stored(tmp_path, record(pinned=64 * MiB, gpu_left=0)))
    _, (breach,) = judge(record(pinned=80 * MiB, gpu_left=64 * MiB), [budget])
    assert breach.message == (
        "pinned 80.00 MiB vs 64.00 MiB stored (+25.0% > +5.0%); "
        "GPU left 64.00 MiB vs 0 B stored (+6.2% of the payload > +5.0%)"
    )


def test_at_the_limit_and_below_it_passes_and_shrinking_never_fails(tmp_path):
    budget = gate(stored(tmp_path, record(peak=100 * MiB, steady=100 * MiB)))
    assert judge(record(peak=105 * MiB, steady=10 * MiB), [budget]) == (Verdict(kind="ok"), [])


def test_a_figure_one_side_did_not_measure_is_not_compared(tmp_path):
    budget = gate(stored(tmp_path, record(pinned=None)))  # CPU emulation: no pinned memory
    assert judge(record(pinned=GiB), [budget])[0].ok


def test_only_the_stored_row_of_the_same_label_counts(tmp_path):
    budget = gate(stored(tmp_path, record("naive", peak=3 * GiB), record("lazy", peak=GiB)))
    assert judge(record("lazy", peak=GiB), [budget])[0].ok
    assert judge(record("naive", peak=4 * GiB), [budget])[0].kind == "regressed"
    assert check_rows([budget], ["lazy + none", "mine"]) == [
        f"--baseline-json {budget.path} has no row 'mine': that row is not compared"
    ]
    with pytest.raises(UsageError, match="has no row of mine, other"):
        check_rows([budget], ["mine", "other"])


def test_a_stored_run_of_another_model_is_bad_input(tmp_path):
    budget = gate(stored(tmp_path, record(payload=GiB)))
    verdict, _ = judge(record(payload=2 * GiB), [budget])
    assert verdict.kind == "bad input" and verdict.exit_code == 2
    assert "payload of 1.00 GiB, this run at 2.00 GiB" in verdict.detail


def test_a_broken_budget_names_the_verdict_before_a_regression(tmp_path):
    path = stored(tmp_path, record(peak=GiB))
    budgets = budgets_from_flags("1.5x", None, None, baseline_json=str(path), max_increase="5%")
    verdict, breaches = judge(record(peak=2 * GiB), budgets)
    assert verdict.kind == "over budget" and verdict.detail.endswith("(+1 more)")
    assert [b.kind for b in breaches] == ["over budget", "regressed"]


@pytest.mark.parametrize(
    ("json_path", "limit", "words"),
    [
        ("stored", None, "needs --max-increase too"),
        (None, "5%", "needs --baseline-json PATH"),
        ("stored", "5", "give a percentage of the stored figure, e.g. 5%"),
        ("missing", "5%", "cannot read --baseline-json"),
        ("notjson", "5%", "is not JSON"),
    ],
)
def test_bad_flags_are_bad_input_before_anything_runs(tmp_path, json_path, limit, words):
    paths = {"stored": stored(tmp_path, record()), "missing": tmp_path / "nope.json"}
    paths["notjson"] = tmp_path / "x.json"
    paths["notjson"].write_text("{")
    given = str(paths[json_path]) if json_path else None
    with pytest.raises(UsageError, match=words):
        budgets_from_flags(None, None, None, baseline_json=given, max_increase=limit)


def test_percentages_parse():
    assert parse_increase("5%") == pytest.approx(0.05)
    assert parse_increase(" 0.5 % ") == pytest.approx(0.005)


# ------------------------------------------------------------------ canary rows


OVER = Verdict(kind="over budget", detail="host peak 3.00x > 1.50x")


def test_the_expected_failure_passes_and_says_so():
    verdict = expecting(OVER, "over budget")
    assert verdict.expected and verdict.passes and verdict.exit_code == 0 and not verdict.ok
    assert verdict.line() == "over budget: host peak 3.00x > 1.50x (as expected)"


def test_a_pass_where_a_failure_was_expected_exits_1():
    verdict = expecting(Verdict(kind="ok"), "over budget")
    assert (verdict.kind, verdict.exit_code) == ("unexpected pass", 1)
    assert verdict.line() == "unexpected pass: expected over budget, but every check passed"


def test_another_failure_than_the_expected_one_exits_1_and_says_what_was_expected():
    verdict = expecting(Verdict(kind="crashed", detail="RuntimeError: x"), "over budget")
    assert verdict.exit_code == 1 and not verdict.expected
    assert verdict.line() == "crashed: RuntimeError: x; expected over budget"


def test_no_expectation_leaves_the_verdict_as_it_is():
    assert expecting(OVER, None) is OVER and expecting(OVER, "ok") is OVER
