"""The user's own code under a real host limit: ``run --host-limit`` and ``repro`` of a
scenario that names a function pair. The kill needs a real worker (the kernel kills it,
the cgroup counts it); the parents run in this process through the CLI's entry point.

The function pairs are verl's shape (``verl_shaped.py``): before PR 6193, a fresh
``.cpu().pin_memory()`` copy every offload, two host copies alive at once in CPU
emulation (2x the payload); after it, one reused copy (1x).

A limit holds what cannot be reclaimed: page cache charged to the worker's group is what
the kernel reclaims before it kills, so a cushion of it (``limit_strategies.py``) is
dropped before the limit is set, and what the kernel still reclaimed instead of killing
does not make a host peak over the limit pass.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, cgroup_reason

pytestmark = pytest.mark.processes(1)  # the repro's child

VERL = "tests.integration.verl_shaped:"
LIMITS = "tests.integration.limit_strategies:"
PRE_6193 = VERL + "offload_megatron_model_to_cpu_pre6193,load_megatron_model_to_gpu"


NO_CGROUP = cgroup_reason()
needs_cgroup = pytest.mark.skipif(
    NO_CGROUP is not None, reason=f"no memory cgroup can be made: {NO_CGROUP}"
)
MODEL = ["--device", "cpu", "--layers", "1", "--payload", "16MiB", "--seq-length", "32"]


LIMIT_RUN = ["--cycles", "1", "--train-steps", "0", "--no-reference-check", "--no-progress"]


def _limited_run(invoke, tmp_path, strategy, size, *model):
    out = tmp_path / "run.json"
    args = ["--strategy", strategy, *(model or MODEL), *LIMIT_RUN, "--host-limit", size]
    result = invoke("run", *args, "--json", str(out), isolated=True)
    (run,) = json.loads(out.read_text())["runs"]
    return result, run


@needs_cgroup
def test_naive_over_a_host_limit_fails(invoke, tmp_path):
    # the reported case: naive's copies (2x at cycle 0's offload, 64 MiB) over 60 MiB
    model = ["--payload", "32MiB", "--layers", "1", "--seq-length", "32"]
    result, run = _limited_run(invoke, tmp_path, "naive", "60MiB", *model)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] in ("killed", "over limit"), run["verdict"]
    assert (run["outcome"]["cycle"], run["outcome"]["phase"]) == (0, "offload")
    assert run["host_limit"]["size_bytes"] == 60 * 2**20
    assert result.stderr.strip().splitlines()[-1].startswith("offloadprobe: error: naive")


@needs_cgroup
def test_lazy_under_a_kibibyte_is_killed(invoke, tmp_path):
    # lazy adds one copy (16 MiB): a 1 KiB limit holds none of it
    result, run = _limited_run(invoke, tmp_path, "lazy", "1KiB")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] in ("killed", "over limit"), run["verdict"]
    assert run["outcome"]["phase"] == "offload"


@needs_cgroup
def test_page_cache_does_not_hold_a_limit_open(invoke, tmp_path):
    # GIVEN a strategy that adds 2x 16 MiB at its offload under a 24 MiB limit, behind
    # 48 MiB of page cache nothing maps and 48 MiB the worker maps (charged to its group)
    result, run = _limited_run(invoke, tmp_path, LIMITS + "BehindMappedCache", "24MiB")
    # THEN the unmapped cache was dropped before the limit was set, the mapped cache was
    # left (the running code's kind), the kernel reclaimed it rather than kill, and the
    # host peak over the limit fails the run all the same
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "over limit", run["verdict"]
    (span,) = run["host_limit"]["spans"]
    assert span["dropped_bytes"] >= 44 * 2**20
    assert span["cache_bytes"] >= 44 * 2**20
    assert span["ended"] and span["reclaimed_bytes"] > 0
    assert span["limit_bytes"] == run["host_limit"]["baseline_bytes"] + 24 * 2**20
    assert "not killed: the kernel reclaimed" in run["verdict"]
    (note,) = [n for n in run["notes"] if n.startswith("--host-limit 24.00 MiB: ")]
    assert "page cache no process maps dropped before each: " in note
    assert "under the limit the kernel reclaimed " in note
    assert " over limit" in " ".join(result.stdout.split()[:8])


@needs_cgroup
def test_run_under_a_host_limit_holds_a_real_limit(invoke, tmp_path):
    """The worker in this process (the kill itself is the repro test's, below, through the
    same window): the flag makes a group, the gate sets its limit at the first offload,
    and the run says what the limit was."""
    out = tmp_path / "run.json"
    args = ["--cycles", "1", "--train-steps", "0", "--no-reference-check", "--no-progress"]
    args += ["--host-limit", "24MiB"]
    result = invoke("run", "--strategy", "lazy", *MODEL, *args, "--json", str(out))
    assert result.exit_code == 0, result.stdout
    (run,) = json.loads(out.read_text())["runs"]
    (note,) = [n for n in run["notes"] if n.startswith("--host-limit 24.00 MiB: ")]
    assert (
        "a real limit (cgroup" in note and "held from each offload to the end of its load" in note
    )
    limit = run["host_limit"]
    assert limit["size_bytes"] == 24 * 2**20 and run["outcome"]["kind"] == "ok"
    assert [s["cycle"] for s in limit["spans"]] == [0] and limit["spans"][0]["ended"]


def test_a_host_limit_over_several_ranks_is_bad_input(invoke):
    args = ["--host-limit", "24MiB", "--nproc-per-node", "2", "--no-progress"]
    result = invoke("run", "--strategy", "lazy", *MODEL, *args)
    assert result.exit_code == 2
    assert "--host-limit limits one worker" in result.stderr


@needs_cgroup
def test_repro_of_a_scenario_naming_a_function_pair(invoke, tmp_path):
    scenario = (ROOT / "scenarios/ci-small.toml").read_text()
    scenario = scenario.replace('pageable = "ok"\n', f'pageable = "ok"\n"{PRE_6193}" = "oom"\n')
    # at half the [repro] payload (the limit is scaled with it: 44 MiB): the pair's two
    # copies in cycle 0 (2x, 56 MiB) still break it by 12 MiB (test_repro_cpu.py runs the
    # packaged scale)
    assert 'payload = "56MiB"' in scenario
    scenario = scenario.replace('payload = "56MiB"', 'payload = "28MiB"')
    path = tmp_path / "mine.toml"
    path.write_text(scenario)
    out = tmp_path / "repro.json"
    args = ["--device", "cpu", "--only", PRE_6193, "--cycles", "1", "--json", str(out)]
    result = invoke("repro", str(path), *args, isolated=True)
    assert result.exit_code == 0, result.stderr + result.stdout
    (mine,) = json.loads(out.read_text())["outcomes"]
    assert mine["strategy"] == PRE_6193 and mine["observed"] == "oom"
    assert mine["detail"].startswith("OOM reproduced: killed at cycle 0, phase offload")
    assert mine["method"].startswith("real limit: cgroup")
