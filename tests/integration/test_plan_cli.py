"""`offloadprobe plan` and `repro` as users drive them: projections, bad input.

``plan`` is arithmetic, so every test runs it in this process (``invoke``)."""

from __future__ import annotations

import json

import pytest

GiB = 2**30


@pytest.fixture(scope="module")
def verl_6193_plan(tmp_path_factory):
    from tests.conftest import ROOT, invoke_cli

    out = tmp_path_factory.mktemp("plan") / "plan.json"
    scenario = ROOT / "scenarios/verl-6193-pinned-peak.toml"
    result = invoke_cli("plan", str(scenario), "--terms", "--json", str(out))
    return result, json.loads(out.read_text())


def test_naive_breaks_1700_gib_per_node_registered_does_not(verl_6193_plan):
    result, doc = verl_6193_plan
    assert result.exit_code == 0, result.stderr
    rows = {r["strategy"]: r for r in doc["strategies"]}
    limit = 1700 * GiB
    assert rows["naive"]["host_limit"] == limit
    assert rows["naive"]["host_per_node"] > limit and rows["naive"]["outcome"] == "oom"
    assert rows["registered"]["host_per_node"] < limit and rows["registered"]["outcome"] == "ok"
    assert rows["lazy"]["per_rank"]["host peak"] == 16.5 * GiB


def test_every_number_comes_with_its_terms(verl_6193_plan):
    result, doc = verl_6193_plan
    lazy = next(r for r in doc["strategies"] if r["strategy"] == "lazy")
    rounding = [t for t in lazy["terms"] if "rounding" in t["label"]]
    assert {t["formula"] for t in rounding} == {
        "PowerOf2Ceil(440604672)",
        "PowerOf2Ceil(14495514624)",
    }
    # the rendered lazy section shows the rounding term too
    section = result.stdout.split("lazy (params)", 1)[1].split("(params)", 1)[0]
    assert "PowerOf2Ceil(14495514624)" in section and "16.00 GiB" in section
    assert "1805.85 GiB > 1700.00" in result.stdout.replace("\n", " ").replace("│", " ")


def test_plan_projects_the_probe_model(invoke, tmp_path):
    out = tmp_path / "probe.json"
    args = ("plan", "--probe", "--payload", "1000MiB", "--no-terms", "--json", str(out))
    result = invoke(*args, "--device", "cuda")  # a projection: no GPU needed to make it
    assert result.exit_code == 0, result.stderr
    rows = {r["strategy"]: r for r in json.loads(out.read_text())["strategies"]}
    assert rows["lazy"]["peak"] == GiB  # 0.98 GiB rounds to one 1 GiB block


BAD = """
[model]
params = 1000000
[parallelism]
tp = 1
pp = 1
dp = 1
gpus_per_node = 1
[offload]
params = true
grads = true
optimizer = false
[limit]
host_memory_per_node = "1GiB"
host_memroy_reserved = "1GiB"
[expect]
naive = "oom"
[source]
title = "bad"
"""


@pytest.mark.parametrize("verb", ["plan", "repro"])
def test_bad_scenarios_are_one_line_exit_2(invoke, tmp_path, verb):
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    for args, words in (
        ([str(tmp_path / "missing.toml")], "cannot read it"),
        ([str(bad)], "limit.host_memroy_reserved: unknown key"),
    ):
        result = invoke(verb, *args)
        lines = result.error_lines
        assert result.exit_code == 2, result.stderr
        assert len(lines) == 1 and "Traceback" not in result.stderr + result.stdout
        assert lines[0].startswith("offloadprobe: error: ") and words in lines[0]


def test_plan_needs_a_scenario_or_probe(invoke):
    result = invoke("plan")
    assert result.exit_code == 2
    assert "give a scenario file or --probe" in result.stderr
