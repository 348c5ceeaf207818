"""Ranks that offloadprobe's own launcher starts in CPU emulation are forked from it, and
hold what fresh ranks hold.

GIVEN ``offloadprobe run --nproc-per-node 2`` on CPU (its launcher forked from the
zygote: the parent expects several workers), with a strategy that records, in each rank,
what its process is (tests/integration/forked_rank_probe.py), THEN each rank is a fork of
its launcher (the launcher's command line, not ``worker rank-job.json``), in a session of
its own with a fresh interpreter's signals, stdin and intra-op threads; AND at its first
offload it shares no page with its launcher any more and maps every file page the
launcher's imports mapped (a fresh rank's own imports map them): no phase copies or faults
in what a fresh rank already holds. Controls, run by hand: ranks that skip making their
pages their own share 207 MiB with the launcher here, and fresh ranks (the fork path
off) fail the first test and pass the second. The ranks' figures and the node cgroup's
then agree as fresh ranks' do (test_node_repro_cpu; fresh against forked side by side:
benchmarks/forked_ranks.py). One launch serves the file; invariants with margins.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from offloadprobe.core.devices import has_gpu
from offloadprobe.isolation import zygote
from tests.conftest import TINY, invoke_cli
from tests.integration.test_ranks_cpu import _margin
from tests.integration.test_zygote_cpu import NEEDS_PFNS

pytestmark = [
    pytest.mark.processes(3),  # the launcher and two ranks, forked
    NEEDS_PFNS,
    pytest.mark.skipif(has_gpu(), reason="a GPU host starts fresh ranks (CUDA and fork)"),
]
MiB = 2**20


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> tuple[Path, dict, dict]:
    folder = tmp_path_factory.mktemp("forked-ranks")
    out = folder / "run.json"
    zygote.expect(2)  # the launcher from the zygote, as repro's and compare's are
    with contextlib.chdir(folder):
        result = invoke_cli(
            "run",
            "--nproc-per-node",
            "2",
            *TINY,
            "--strategy",
            "tests.integration.forked_rank_probe:RecordsItsProcess",
            "--json",
            str(out),
            "--no-progress",
            isolated=True,
        )
    assert result.exit_code == 0, result.stdout[-3000:] + result.stderr[-2000:]
    ranks = {r: json.loads((folder / f"rank{r}.json").read_text()) for r in (0, 1)}
    return folder, json.loads(out.read_text()), ranks


def test_each_rank_is_a_fork_of_its_launcher_made_a_fresh_process(launch):
    _, _, ranks = launch
    for facts in ranks.values():
        assert not any(arg.endswith("rank-job.json") for arg in facts["cmdline"]), facts
        assert facts["cmdline"] == facts["parent_cmdline"], facts  # a fork: no exec
        assert facts["sid"] == facts["pid"]  # a session of its own, as torch gives a fresh one
        assert facts["sigterm_default"]  # not torch's agent's handler: SIGTERM kills it
        assert facts["stdin"] == "/dev/null" and facts["process"] == "MainProcess"
        assert facts["omp"] == "1" and facts["threads"] == 1  # torchrun's rule, honoured
    assert ranks[0]["pid"] != ranks[1]["pid"]


def test_each_rank_runs_in_a_memory_cgroup_of_its_own_below_the_node(launch):
    """As the kernel lists them (/proc/PID/cgroup, read in the rank): each rank in a group
    of its own, both below the launcher's (the node's) group; every phase's host figures
    come from it."""
    _, doc, ranks = launch
    groups = {r: facts["memory_cgroup"] for r, facts in ranks.items()}
    assert len(set(groups.values())) == 2, groups
    for facts in ranks.values():
        assert facts["memory_cgroup"].rsplit("/", 1)[0] == facts["parent_memory_cgroup"], facts
    (run,) = doc["runs"]
    for rank in run["world"]["ranks"]:
        sources = {p["host"]["group_source"] for c in rank["cycles"] for p in c["phases"]}
        assert sources == {"cgroup"}, sources
    assert any("each rank's own memory cgroup" in note for note in run["notes"]), run["notes"]


def test_torch_elastic_agent_leaves_nothing_behind(launch):
    # torch's agent makes a log folder per launch (each rank's error file in it): in the
    # launcher's job folder, removed with it, not a torchelastic_* of its own in $TMPDIR
    _, _, ranks = launch
    for facts in ranks.values():
        error_file = Path(facts["error_file"])
        assert not any(p.name.startswith("torchelastic_") for p in error_file.parents), facts
        (job,) = [p for p in error_file.parents if p.name.startswith("offloadprobe-")]
        assert not job.exists()


def test_a_forked_rank_holds_what_a_fresh_rank_holds(launch):
    _, doc, ranks = launch
    for facts in ranks.values():
        # its pages are its own (a few the strategy wrote meanwhile at most)
        assert facts["shared_bytes"] <= 1 * MiB, facts
        # every file page the launcher's imports mapped is mapped here too
        file_pages = facts["parent_rss"]["RssFile"]
        assert facts["rss"]["RssFile"] >= file_pages - _margin(file_pages), facts
        assert facts["rss"]["RssAnon"] >= facts["parent_rss"]["RssAnon"], facts
    (run,) = doc["runs"]
    world = run["world"]
    baselines = [r["baseline_host_bytes"] for r in world["ranks"]]
    assert abs(baselines[0] - baselines[1]) <= _margin(max(baselines)), baselines
    for rank, facts in zip(world["ranks"], ranks.values(), strict=True):
        assert rank["failure"] is None and rank["summary"]["integrity_ok"]
        # its baseline is its own group's (page cache is not held): its anonymous pages,
        # the launcher's after the same imports, charged there when it made them its own
        launcher = facts["parent_rss"]["RssAnon"]
        assert rank["baseline_host_bytes"] >= launcher - _margin(launcher)
    (node,) = world["nodes"]
    peaks = node["figures"]["host_peak_bytes"]
    assert peaks["max"] - _margin(peaks["max"]) <= node["peak_bytes"]
    assert node["peak_bytes"] <= peaks["sum"] + _margin(peaks["sum"])
