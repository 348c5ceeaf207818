"""Each rank in a memory cgroup of its own: what a rank keeps outside its process counts in
its figures, and ``--max-host-peak`` holds every rank and the node as a whole.

GIVEN ``offloadprobe run --nproc-per-node 2 --max-host-peak 0.5x`` on CPU with a strategy
that keeps its offloaded copy outside its process's RSS, with no host copy on the way
(tests/integration/rank_outside_strategies.py: rank 0 in a memfd, rank 1 in a file in
/dev/shm), THEN each rank's host figures count that copy (the truth: the file's blocks as
the kernel reports them, written by the strategy at each offload's end), the node's
measured peak counts both, and both budgets break (exit 1). Before each rank had a group
of its own, a rank's figures were its RSS (about 0 here) and no budget read the node: the
run passed. One launch serves the file (4 MiB, no train step, one cycle); the figures
are noisy measurements: invariants with margins.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from offloadprobe.isolation import zygote
from tests.conftest import cgroup_reason, invoke_cli
from tests.integration.rank_outside_strategies import PREFIX, SHM

NO_CGROUP = cgroup_reason()
pytestmark = [
    pytest.mark.processes(3),  # the launcher and two ranks, forked
    pytest.mark.skipif(NO_CGROUP is not None, reason=f"no memory cgroup here: {NO_CGROUP}"),
]
MiB = 2**20
RUN = [
    "run",
    "--nproc-per-node",
    "2",
    "--device",
    "cpu",
    "--layers",
    "1",
    "--payload",
    "4MiB",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--cycles",
    "1",
    "--train-steps",
    "0",
    "--no-reference-check",
    "--no-progress",
    "--strategy",
    "tests.integration.rank_outside_strategies:MemfdOrShm",
    "--max-host-peak",
    "0.5x",
]


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rank-cgroups")
    out = folder / "run.json"
    zygote.expect(2)  # the launcher from the zygote, as in test_forked_ranks_cpu
    try:
        with contextlib.chdir(folder):
            result = invoke_cli(*RUN, "--json", str(out), isolated=True)
    finally:
        for left in Path(SHM).glob(f"{PREFIX}*"):  # a rank that died before its close
            left.unlink(missing_ok=True)
    assert out.exists(), result.stdout[-3000:] + result.stderr[-2000:]
    (run,) = json.loads(out.read_text())["runs"]
    truth = {r: json.loads((folder / f"outside-rank{r}.json").read_text()) for r in (0, 1)}
    return result, run, truth


def test_a_copy_a_rank_keeps_in_a_memfd_or_dev_shm_counts_in_its_host_figures(launch):
    _, run, truth = launch
    assert [truth[r]["in"] for r in (0, 1)] == ["memfd", "/dev/shm"]
    for rank in run["world"]["ranks"]:
        held = truth[rank["place"]["rank"]]["bytes"]
        assert held >= rank["payload_bytes"] > 0  # the whole copy, as the kernel keeps it
        summary = rank["summary"]
        # its own group saw the copy (kernel memory the group charges beside it: a margin)
        assert 0.9 * held <= summary["steady_host_bytes"] <= 1.1 * held + 2 * MiB, summary
        assert summary["host_peak_bytes"] >= 0.9 * held, summary
        phases = [p for c in rank["cycles"] for p in c["phases"]]
        assert {p["host"]["group_source"] for p in phases} == {"cgroup"}


def test_max_host_peak_holds_each_rank_and_the_node_as_a_whole(launch):
    result, run, truth = launch
    assert result.exit_code == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert run["outcome"]["kind"] == "over budget", run["verdict"]
    assert run["outcome"]["detail"].startswith("rank 0: host peak"), run["outcome"]
    # the node's measured peak sees both copies (and the launcher's noise: a margin)
    (node,) = run["world"]["nodes"]
    both = truth[0]["bytes"] + truth[1]["bytes"]
    assert 0.9 * both <= node["peak_bytes"] <= 1.1 * both + 4 * MiB, node["peak_bytes"]
    assert "--max-host-peak: node 0: host peak" in result.stderr, result.stderr
    assert "of the bytes its ranks move > 0.50x" in result.stderr
    notes = " ".join(run["notes"])
    assert "each rank's own memory cgroup" in notes
    assert "holds each node's measured peak too" in notes
