"""``run --host-limit SIZE``: the worker under a real memory cgroup limit, held as ``repro``
holds it (``repro/window.py``).

The worker runs in a memory cgroup made for it, unlimited while it imports, builds and
trains. At the start of its first offload it waits at its gate; the group's page cache no
process maps is dropped, its usage then (its whole pre-offload footprint) is the
baseline, and from each offload's start to the end of its load the group is limited to::

    limit = usage at the first offload + SIZE

so ``SIZE`` is what the offload code may add over what the job held before it: the host
a node has left for the offloaded copies. A worker that crosses it is killed by the kernel,
the group's ``oom_kill`` counter confirms it, and the verdict says so (``killed: SIGKILL,
cgroup OOM``), at the phase it was in. One the kernel let through by reclaiming page cache
instead (cache a library mapped, a file the strategy wrote) fails all the same: its
measured host peak over the baseline tops ``SIZE`` (``over limit``, ``core.verdicts``).
The run's ``host_limit`` record and its notes say what was dropped and reclaimed. Where no
cgroup can be made the flag is refused.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import Report
from offloadprobe.measure.cgroup import CgroupUnavailable, MemoryGroup, create_group
from offloadprobe.repro.children import GateKeeper
from offloadprobe.repro.window import LimitWindow


@dataclass(kw_only=True, slots=True)
class HostLimit:
    """One worker's limited group, the window that holds the limit, its gate keepers."""

    size: int
    group: MemoryGroup
    window: LimitWindow
    keepers: list[GateKeeper] = field(default_factory=list)

    def measure_options(self) -> dict[str, Any]:
        """What ``isolation.rows.measure`` takes to run the worker under the limit."""
        return {
            "cgroup": self.group,
            "gate": True,
            "on_started": self._started,
            "amend": self.amend,
        }

    def _started(self, job: Any) -> GateKeeper:
        keeper = GateKeeper(job.gate_dir, self.window)
        keeper.start()
        self.keepers.append(keeper)
        return keeper

    def amend(self, report: Report) -> Report:
        """``report`` with the limit's record and note on its run (before it is judged)."""
        self.window.finish()
        errors = [e for k in self.keepers for e in k.errors]
        runs = []
        for run in report.runs:
            record = self.window.record(errors, run.phases)
            note = record.note("--host-limit")
            runs.append(replace(run, host_limit=record, notes=[*run.notes, note]))
        return replace(report, runs=runs)


@contextlib.contextmanager
def host_limited(size: int) -> Iterator[HostLimit]:
    """A group for one worker and the window that limits it; removed afterwards."""
    try:
        group = create_group(f"offloadprobe-host-limit-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    except (CgroupUnavailable, OSError) as why:
        raise UsageError(
            f"--host-limit needs a memory cgroup this process can make, and none can be: {why}"
        ) from None
    try:
        yield HostLimit(size=size, group=group, window=LimitWindow(group, size))
    finally:
        with contextlib.suppress(OSError):
            group.kill()
            group.remove()
