"""The node's memory cgroup: every rank of a node runs inside one group (each in a group of
its own below it, where our launcher made them: ``rankgroups``), so the node's peak is the
kernel's own counter, not a sum of guesses.

``offloadprobe run --nproc-per-node`` makes the group before it starts torchrun and names
it in the job (``Job.node_cgroup``); under a torchrun the user started, local rank 0 makes
one and the node's other ranks join it. Memory a rank touched before it joined stays charged where
it was, so node figures are read as growth over the node's usage at the first offload.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from offloadprobe.measure.cgroup import CgroupUnavailable, MemoryGroup, create_group


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Where this node's ranks run, or why no node cgroup exists."""

    group: MemoryGroup | None
    missing: str | None
    made_here: bool = False

    @property
    def description(self) -> str | None:
        if self.group is None:
            return None
        note = f"; {self.group.note}" if self.group.note else ""
        return f"cgroup v{self.group.version} {self.group.path}{note}"


def _join(path: Path) -> MemoryGroup:
    """Move this process into the memory cgroup at ``path``."""
    group = MemoryGroup.at(path)
    group.join()
    return group


def enter_node_group(
    *,
    local_rank: int,
    run_id: str,
    node_rank: int,
    given: str | None = None,
    missing: str | None = None,
    join: bool = True,
) -> NodeGroup:
    """Put this rank in its node's cgroup: the one the parent made (``given``), or one local
    rank 0 makes; ``missing`` says why the parent could not make one. ``join=False``: the
    rank is in a group of its own below ``given`` already, and stays there."""
    if given:
        if not join:
            return NodeGroup(MemoryGroup.at(given), None)
        try:
            return NodeGroup(_join(Path(given)), None)
        except OSError as err:
            return NodeGroup(None, f"cannot join the node cgroup {given} ({err.strerror})")
    if missing:
        return NodeGroup(None, missing)
    name = f"offloadprobe-{run_id}-node{node_rank}"
    if local_rank == 0:
        try:
            group = create_group(name)
            group.procs.write_text(str(os.getpid()))
            return NodeGroup(group, None, made_here=True)
        except (CgroupUnavailable, OSError) as err:
            return NodeGroup(None, str(err))
    return NodeGroup(None, "pending")  # joined after local rank 0 made it (see join_made)


def join_made(found: NodeGroup, leader_path: str | None, leader_missing: str | None):
    """A non-leader rank joins the group its local rank 0 made (passed over the control
    group), or records why there is none."""
    if found.missing != "pending":
        return found
    if leader_path is None:
        return NodeGroup(None, leader_missing or "local rank 0 made no node cgroup")
    deadline = time.monotonic() + 5
    while True:
        try:
            return NodeGroup(_join(Path(leader_path)), None)
        except OSError as err:
            if time.monotonic() > deadline:
                return NodeGroup(None, f"cannot join {leader_path} ({err.strerror})")
            time.sleep(0.05)
