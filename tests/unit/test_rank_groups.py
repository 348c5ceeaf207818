"""Ranks in memory cgroups of their own, and the node held as a whole.

The verdict rules on hand-built records (exact): ``--max-host-peak`` holds each node's
measured peak against the limit times the bytes its ranks move, so a node over it fails
even where every rank keeps it (a rank with no group of its own sees only its process
tree; the node's figure sees the rest). The groups themselves on the kernel's real
cgroups, with processes that only sleep: the launcher's mover puts a rank in its own
group before the rank goes on, and finds a process of the rank that moves itself out.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace

import pytest

from offloadprobe.core.budgets import parse_host_peak
from offloadprobe.core.records import WorldRun
from offloadprobe.core.verdicts import judge
from offloadprobe.measure.cgroup import MemoryGroup
from offloadprobe.measure.node import NodeSource, node_records
from tests.conftest import cgroup_reason
from tests.unit import reporter_fakes as fake

MiB = fake.MiB


def _world(rank_peak: int, node_peak: int | None, *, ends_only: bool = False):
    """Two ranks on one node, each moving 128 MiB and peaking ``rank_peak`` over its
    baseline; the node's measured peak ``node_peak`` (None: no node figure)."""
    ranks = [fake.rank_run(r, 0, peak=rank_peak) for r in (0, 1)]
    source = NodeSource(
        node_rank=0,
        hostname="vm",
        cgroup="cgroup v1 /x" if node_peak is not None else None,
        cgroup_missing=None if node_peak is not None else "cannot create a memory cgroup",
        readings=fake.node_readings(node_peak or 0, local=not ends_only),
        **({"ends_only": True} if ends_only else {}),
    )
    world = WorldRun(
        world_size=2,
        nnodes=1,
        layout={"tp": 1, "pp": 1, "ep": 1, "cp": 1, "vpp": None, "dp": 2},
        ranks=ranks,
        nodes=node_records(ranks, [source]),
        notes=[],
    )
    return replace(ranks[0], world=world)


def test_a_node_over_max_host_peak_fails_though_every_rank_keeps_it():
    # each rank 0.50x of its 128 MiB; the node 1.50x of the 256 MiB its ranks move: what
    # the ranks' own figures do not see (their process trees, with no group of their own)
    run = _world(64 * MiB, 384 * MiB)
    verdict, breaches = judge(run, [parse_host_peak("1.1x")])
    assert verdict.kind == "over budget" and verdict.exit_code == 1
    assert verdict.detail == "node 0: host peak 1.50x of the bytes its ranks move > 1.10x"
    assert [b.budget for b in breaches] == ["--max-host-peak"]
    # as a size: each rank's share, times the node's ranks
    verdict, _ = judge(run, [parse_host_peak("100MiB")])
    assert verdict.detail == "node 0: host peak 384.00 MiB > 200.00 MiB (2 ranks x 100.00 MiB)"


def test_a_node_within_max_host_peak_passes_and_a_rank_over_it_names_both():
    assert judge(_world(64 * MiB, 200 * MiB), [parse_host_peak("1.1x")])[0].ok
    verdict, breaches = judge(_world(192 * MiB, 384 * MiB), [parse_host_peak("1.1x")])
    assert verdict.detail.startswith("rank 0: host peak 1.50x > 1.10x")
    assert breaches[-1].message.startswith("node 0: host peak 1.50x")


def test_without_a_budget_the_node_decides_nothing():
    assert judge(_world(64 * MiB, 384 * MiB))[0].ok


def test_a_node_without_a_cgroup_is_judged_on_its_process_tree_at_the_phase_ends():
    run = _world(64 * MiB, 384 * MiB, ends_only=True)
    (node,) = run.world.nodes
    assert node.peak_bytes == 384 * MiB  # the readings' larger end, per phase
    assert judge(run, [parse_host_peak("1.1x")])[0].kind == "over budget"


def test_what_each_figure_covers_is_said():
    from offloadprobe.engine.world.rankgroups import RankGroup
    from offloadprobe.measure.node import node_notes

    (node,) = _world(64 * MiB, None).world.nodes
    assert node_notes([node]) == ["node 0: no measured figure, no budget holds it whole"]
    (node,) = _world(64 * MiB, 384 * MiB).world.nodes
    assert "holds each node's measured peak too" in node_notes([node])[0]
    tree = replace(node, cgroup="process tree of pid 7", cgroup_missing="not root")
    assert "a floor of its peak (a memfd is in neither)" in node_notes([tree])[1]
    missing = RankGroup(None, "no node cgroup: not root").note
    assert "(no node cgroup: not root): its process tree's RSS" in missing
    assert "only a node memory cgroup's figure sees" in missing


def test_a_rank_the_launcher_does_not_move_goes_on_and_says_why(tmp_path):
    from offloadprobe.engine.world.rankgroups import RankGroups, await_move

    said = await_move(tmp_path, 0, wait_s=0.05)
    assert said.path is None and "did not move it into its group within 0.05 s" in said.missing
    made = RankGroups.make(tmp_path, None, "not root", 2)
    assert made.groups == {} and made.missing == "no node cgroup: not root"
    made = RankGroups.make(tmp_path, str(tmp_path), None, 2)  # a folder, not a cgroup
    assert made.groups == {} and "no memory.limit_in_bytes" in made.missing


def _fake_v1(root, name: str, kills: int, pids: list[int]):
    path = root / name
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    (path / "memory.oom_control").write_text(f"oom_kill_disable 0\noom_kill {kills}\n")
    return MemoryGroup(1, path)


def test_a_v1_node_group_counts_its_rank_groups_processes_and_oom_kills(tmp_path):
    # cgroup v1 counts an OOM kill in the victim's own group only: a rank's, not the node's
    node = _fake_v1(tmp_path, "node", 0, [10])
    _fake_v1(tmp_path / "node", "rank-local0", 1, [11])
    _fake_v1(tmp_path / "node", "rank-local1", 0, [12, 13])
    assert node.oom_kills() == 1
    assert sorted(node.pids()) == [10, 11, 12, 13]
    assert [g.path.name for g in node.subtree()] == ["rank-local0", "rank-local1", "node"]


NO_CGROUP = cgroup_reason()
needs_cgroup = pytest.mark.skipif(NO_CGROUP is not None, reason=f"no cgroup: {NO_CGROUP}")


@needs_cgroup
def test_the_launcher_moves_a_rank_into_its_group_and_finds_a_process_that_leaves(tmp_path):
    """The launcher's side, with ``sleep`` for a rank: it asks (its pid in the folder, as
    ``await_move`` writes it), the mover puts it in its group and answers; once it moves
    itself out (as root it can, its memory with it) the mover finds it and kills it."""
    import json

    from offloadprobe.engine.world.rankgroups import RankGroups, _answer, _ask
    from offloadprobe.measure.cgroup import create_group

    node = create_group(f"offloadprobe-test-ranks-{os.getpid()}")
    rank = subprocess.Popen(["sleep", "60"])
    try:
        groups = RankGroups.make(tmp_path, str(node.path), None, 1)
        groups.look_every_s = 0.02
        (own,) = groups.groups.values()
        assert own.path.parent == node.path
        _ask(tmp_path, 0).write_text(str(rank.pid))
        groups.start()
        deadline = time.monotonic() + 10
        while not _answer(tmp_path, 0).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        said = json.loads(_answer(tmp_path, 0).read_text())
        assert said == {"pid": rank.pid, "path": str(own.path), "made": None}
        assert str(rank.pid) in own.procs.read_text().split()  # the kernel's list
        node.join(rank.pid)  # out of its rank's group, into the node's
        while not groups.found and time.monotonic() < deadline:
            time.sleep(0.01)
        message = groups.stop()
        assert message is not None and f"pid {rank.pid} (sleep 60)" in message, message
        assert "left the rank's memory cgroup" in message
        assert rank.wait(timeout=10) == -9  # killed
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()
        node.kill()
        node.remove()
    assert not node.path.exists()
