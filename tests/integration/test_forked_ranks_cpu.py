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
        launcher = sum(facts["parent_rss"].values())
        assert rank["baseline_host_bytes"] >= launcher - _margin(launcher)
    (node,) = world["nodes"]
    peaks = node["figures"]["host_peak_bytes"]
    assert peaks["max"] - _margin(peaks["max"]) <= node["peak_bytes"]
    assert node["peak_bytes"] <= peaks["sum"] + _margin(peaks["sum"])
