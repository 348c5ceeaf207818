"""Phases aligned across ranks, and the node cgroup read around each of them.

Before a phase every rank waits at a barrier; local rank 0 then resets the node cgroup's
peak and reads its usage (where there is no node cgroup: the RSS of the ranks' launcher's
process tree plus /dev/shm, at the phase's two ends); a second barrier starts the phase on
all ranks together. After it, a barrier waits for every rank to end the phase, local rank
0 reads the node's peak, and the ranks exchange whether they failed (so every rank stops
at the same phase, and none waits forever for a rank that stopped in a phase without
collectives).
The exchanges run on a CPU-side (gloo) group: control traffic never touches the device.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from offloadprobe.core.outcomes import Failure
from offloadprobe.measure.cgroup import MemoryGroup, PeakCounter
from offloadprobe.measure.governing import shm_used, tree_rss
from offloadprobe.measure.node import NodeReading


class PhaseFence:
    """Barriers around every phase; the node leader's cgroup readings."""

    def __init__(
        self,
        group: Any,
        *,
        leader: bool,
        node_cgroup: str | None,
        on_abort: Callable[[Failure], None] | None = None,
        tree_root: int | None = None,
    ) -> None:
        """``node_cgroup``: the node's memory cgroup (the leader reads it; each rank may
        run in a group of its own below it). Without one, ``tree_root``: the process whose
        tree holds the node's ranks (their launcher), read with /dev/shm at each phase's
        ends instead."""
        self.group = group
        self.on_abort = on_abort
        self.leader = leader
        files = MemoryGroup.at(node_cgroup).files if leader and node_cgroup else None
        self.counter = PeakCounter(files) if files is not None else None
        self.tree_root = tree_root if leader and files is None else None
        self.readings: list[NodeReading] = []
        self._before: int | None = None
        self._local = False

    def before(self) -> None:
        """Call on every rank right before a phase's measurement starts."""
        dist.barrier(group=self.group)
        if self.counter is not None:
            self._local = self.counter.reset()
            self._before = self.counter.usage()
        elif self.tree_root is not None:
            self._before = self._tree()
        dist.barrier(group=self.group)

    def _tree(self) -> int:
        return tree_rss(self.tree_root) + shm_used()

    def after(self, cycle: int, phase: str, failure: str | None) -> list[tuple[int, str]]:
        """Call on every rank right after a phase; returns ``(rank, failure)`` of every rank
        that failed in it (this one included). The node is read once every rank has ended
        the phase, and before any rank goes on (they wait for the leader in the exchange)."""
        dist.barrier(group=self.group)
        if self.counter is not None:
            self.readings.append(
                NodeReading(
                    cycle=cycle,
                    phase=phase,
                    usage_before=self._before,
                    peak=self.counter.peak(),
                    usage_after=self.counter.usage(),
                    peak_is_phase_local=self._local,
                )
            )
        elif self.tree_root is not None and self._before is not None:
            after = self._tree()  # no peak between the ends: the larger end is a floor
            self.readings.append(
                NodeReading(
                    cycle=cycle,
                    phase=phase,
                    usage_before=self._before,
                    peak=max(self._before, after),
                    usage_after=after,
                    peak_is_phase_local=False,
                )
            )
        return self.failed_anywhere(failure)

    def failed_anywhere(self, failure: str | None) -> list[tuple[int, str]]:
        """Every rank says whether it failed; all ranks get the same answer."""
        said: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(said, failure, group=self.group)
        return [(rank, text) for rank, text in enumerate(said) if text is not None]

    def abort(self, failure: Failure) -> None:
        """A phase that runs collectives (the train step) failed on this rank: the other
        ranks may wait in a collective for it, never reaching the fence. Say why in one
        line and in this rank's result, then end the process, so that torchrun's agent
        stops the other ranks and the launcher reports this rank's failure."""
        print(f"offloadprobe: error: {failure.text}", file=sys.stderr, flush=True)
        if self.on_abort is not None:
            self.on_abort(failure)
        sys.stderr.flush()
        os._exit(1)

    def close(self) -> None:
        if self.counter is not None:
            self.counter.close()
