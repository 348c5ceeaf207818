"""The node-level repro on CPU: two gloo ranks in one node memory cgroup under the scaled
node limit (``[repro] ranks_per_node``).

Real processes are what is tested (the node cgroup, the kernel's OOM killer, the phase
fences): the repro parent runs in this process, each strategy's child launches two real
ranks. Node figures are noisy measurements: asserted as invariants with margins.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.integration.test_ranks_cpu import _margin
from tests.integration.test_repro_cpu import NO_CGROUP

pytestmark = pytest.mark.processes(6)  # two children, two ranks each


@pytest.mark.skipif(NO_CGROUP is not None, reason=f"no memory cgroup here: {NO_CGROUP}")
def test_node_level_repro_kills_naive_and_keeps_lazy(tmp_path):
    """The repro parent runs in this process; each strategy's child launches two real
    ranks in one node cgroup under the scaled node limit."""
    from tests.conftest import invoke_cli

    out = tmp_path / "repro.json"
    result = invoke_cli(
        "repro",
        str(ROOT / "scenarios/ci-node.toml"),
        "--device",
        "cpu",
        "--only",
        "naive",
        "--only",
        "lazy",
        "--cycles",
        "2",
        "--json",
        str(out),
        isolated=True,
    )
    assert result.exit_code == 0, result.stdout[-3000:] + result.stderr[-2000:]
    doc = json.loads(out.read_text())
    observed = {o["strategy"]: o for o in doc["outcomes"]}
    assert observed["naive"]["observed"] == "oom"
    assert "node level" in observed["naive"]["detail"]
    assert "cgroup OOM" in observed["naive"]["detail"]
    assert observed["lazy"]["observed"] == "ok"
    assert observed["lazy"]["margin"] > 0
    # Two ranks in one node cgroup: the node's peak lies between its largest rank's peak
    # and the sum of both (lazy holds one copy per rank: about twice one rank).
    node = observed["lazy"]["node"]
    peaks = node["figures"]["host_peak_bytes"]
    assert node["ranks"] == [0, 1] and peaks["ranks"] == 2
    assert peaks["max"] - _margin(peaks["max"]) <= node["peak_bytes"]
    assert node["peak_bytes"] <= peaks["sum"] + _margin(peaks["sum"])
    assert node["peak_bytes"] >= 1.8 * peaks["min"]
