"""One rank of a run over several ranks: join the node, run the cycles, gather on rank 0.

Every rank runs :func:`engine.runner.run_cycles` on its own shard of the model, with its
phases fenced (``fence.py``). At the end each rank sends its record (and each node's
local rank 0 its node cgroup readings) to rank 0, which builds the world's report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from offloadprobe.core.job import Job
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import Report, RunRecord, WorldRun, run_from_dict, run_to_dict
from offloadprobe.core.world_records import RankPlace
from offloadprobe.engine.run_record import report_of
from offloadprobe.engine.runner import Hooks, run_cycles
from offloadprobe.engine.runtime.session import runtime_for
from offloadprobe.engine.world import nodegroup
from offloadprobe.engine.world.fence import PhaseFence
from offloadprobe.engine.world.rankgroups import RankGroup, await_move
from offloadprobe.measure.cgroup import home_procs
from offloadprobe.measure.node import (
    NodeReading,
    NodeSource,
    node_notes,
    node_records,
    tree_description,
)
from offloadprobe.measure.phase_log import PhaseLog


def _leader_group(world: Any, node: nodegroup.NodeGroup, group: Any) -> nodegroup.NodeGroup:
    """Tell every rank of a node where its local rank 0 put the node cgroup; join it."""
    path = str(node.group.path) if node.group is not None else None
    mine = (world.node_rank, world.local_rank, path, node.missing)
    said: list[Any] = [None] * world.world_size
    dist.all_gather_object(said, mine, group=group)
    leader = next(s for s in said if s[0] == world.node_rank and s[1] == 0)
    return nodegroup.join_made(node, leader[2], leader[3])


def _merged(ranks: list[RunRecord], world: WorldRun) -> RunRecord:
    """The row's record: rank 0's, carrying the first failure of any rank and every rank's
    integrity findings (each line names its rank). Residency facts stay per rank (in
    ``world.ranks``), where the verdict rules judge them."""
    first = ranks[0]
    failing = next((r for r in ranks if r.failure is not None), None)
    failure = first.failure
    if failing is not None and failing is not first and failing.failure is not None:
        rank = failing.place.rank if failing.place else "?"
        failure = dataclasses.replace(
            failing.failure, message=f"rank {rank}: {failing.failure.message}"
        )
    many = len(ranks) > 1
    integrity = [
        f"rank {r.place.rank}: {line}" if many and r.place else line
        for r in ranks
        for line in r.integrity
    ]
    notes = list(dict.fromkeys(n for r in ranks for n in r.notes))
    return dataclasses.replace(
        first, integrity=integrity, notes=notes, world=world, failure=failure, residency=[]
    )


def run_rank(job: Job, log: PhaseLog, *, on_abort: Callable[[Failure], None]) -> Report | None:
    """This rank's share of the run; rank 0 returns the world's report, others None."""
    cfg = job.config
    with runtime_for(cfg) as runtime:
        world = runtime.world
        group = runtime.control_group()
        own = rank_group(job, world.local_rank)
        node = nodegroup.enter_node_group(
            local_rank=world.local_rank,
            run_id=os.environ.get("TORCHELASTIC_RUN_ID", str(os.getppid())),
            node_rank=world.node_rank,
            given=job.node_cgroup,
            missing=job.node_cgroup_missing,
            join=own.path is None,  # a rank in a group of its own stays there
        )
        node = _leader_group(world, node, group)
        leader = world.local_rank == 0
        path = str(node.group.path) if node.group is not None else None
        # no node cgroup: the tree of our launcher (a user's torchrun has none of ours)
        root = os.getppid() if path is None and job.rank_of_launch else None
        fence = PhaseFence(
            group, leader=leader, node_cgroup=path, on_abort=on_abort, tree_root=root
        )
        hooks = Hooks(
            on_start=log.start,
            on_phase=lambda r: log.end(r.cycle, r.phase, dataclasses.asdict(r)),
            group="cgroup" if own.path is not None else "rank tree",
        )
        try:
            record = run_cycles(cfg, runtime, dataclasses.replace(hooks, fence=fence))
        finally:
            fence.close()
        if record.failure is not None and record.failure.phase == "setup":
            fence.abort(record.failure)  # its peers may wait in a collective of the build
        place = RankPlace(
            rank=world.rank,
            local_rank=world.local_rank,
            node_rank=world.node_rank,
            world_size=world.world_size,
            hostname=socket.gethostname(),
        )
        record = dataclasses.replace(record, place=place, notes=[*record.notes, own.note])
        source = None
        if leader:
            source = NodeSource(
                node_rank=world.node_rank,
                hostname=place.hostname,
                cgroup=node.description or (tree_description(root) if root else None),
                cgroup_missing=node.missing,
                readings=fence.readings,
                ends_only=root is not None,
            )
        sent = (run_to_dict(record), dataclasses.asdict(source) if source else None)
        got: list[Any] | None = [None] * world.world_size if world.rank == 0 else None
        dist.gather_object(sent, got, dst=0, group=group)
        _leave(node, group, made_by_parent=job.node_cgroup is not None)
        if got is None:
            return None
        ranks = sorted((run_from_dict(r) for r, _ in got), key=_rank_of)
        sources = [_source(s) for _, s in got if s is not None]
        layout = {
            "tp": world.tp,
            "pp": world.pp,
            "ep": world.ep,
            "cp": world.cp,
            "vpp": world.vpp,
            "dp": world.dp,
        }
        world_run = WorldRun(
            world_size=world.world_size,
            nnodes=len(sources) or 1,
            layout=layout,
            ranks=ranks,
            nodes=node_records(ranks, sources),
            notes=["phases aligned across ranks with barriers on a gloo group"],
        )
        row = _merged(ranks, world_run)
        row = dataclasses.replace(row, notes=[*row.notes, *node_notes(world_run.nodes)])
        return report_of(
            cfg,
            row,
            device=runtime.device,
            emulated=runtime.emulated,
            note=runtime.note,
            extra_settings={"world_size": world.world_size, "layout": world.layout},
        )


def rank_group(job: Job, local_rank: int) -> RankGroup:
    """This rank's own memory cgroup (its launcher moved it there), or why it has none."""
    if job.rank_cgroups:
        return await_move(job.folder, local_rank)
    if job.rank_of_launch:
        return RankGroup(None, job.rank_cgroups_missing or "its launcher made none")
    return RankGroup(None, "under a torchrun offloadprobe did not start, nothing moves ranks")


def _rank_of(record: RunRecord) -> int:
    return record.place.rank if record.place else 0


def _source(data: dict[str, Any]) -> NodeSource:
    fields = dict(data)
    fields["readings"] = [NodeReading(**r) for r in data["readings"]]
    return NodeSource(**fields)


def _leave(node: nodegroup.NodeGroup, group: Any, *, made_by_parent: bool) -> None:
    """Under a user's torchrun, the group local rank 0 made is removed at the end: every
    rank moves back to the group above it first."""
    made = node.group is not None and not made_by_parent
    if made and node.group is not None:
        with contextlib.suppress(OSError):
            home_procs(node.group).write_text(str(os.getpid()))
    dist.barrier(group=group)
    if node.made_here and node.group is not None:
        with contextlib.suppress(OSError):
            node.group.remove()
