"""The user's own code under a real host limit: ``run --host-limit`` and ``repro`` of a
scenario that names a function pair. The kill needs a real worker (the kernel kills it,
the cgroup counts it); the parents run in this process through the CLI's entry point.

The function pairs are verl's shape (``verl_shaped.py``): before PR 6193, a fresh
``.cpu().pin_memory()`` copy every offload, two host copies alive at once in CPU
emulation (2x the payload); after it, one reused copy (1x).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, cgroup_reason

pytestmark = pytest.mark.processes(1)  # the repro's child

VERL = "tests.integration.verl_shaped:"
PRE_6193 = VERL + "offload_megatron_model_to_cpu_pre6193,load_megatron_model_to_gpu"


NO_CGROUP = cgroup_reason()
needs_cgroup = pytest.mark.skipif(
    NO_CGROUP is not None, reason=f"no memory cgroup can be made: {NO_CGROUP}"
)
MODEL = ["--device", "cpu", "--layers", "1", "--payload", "16MiB", "--seq-length", "32"]


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
