"""``run --host-limit SIZE``: the worker under a real memory cgroup limit, held as ``repro``
holds it (``repro/host.py``).

The worker runs in a memory cgroup made for it, unlimited while it imports, builds and
trains. At the start of its first offload it waits at its gate; the group's usage then
(its whole pre-offload footprint) is the baseline, and from each offload's start to the
end of its load the group is limited to::

    limit = usage at the first offload + SIZE

so ``SIZE`` is what the offload code may add over what the job held before it: the host
a node has left for the offloaded copies. A worker that crosses it is killed by the kernel,
the group's ``oom_kill`` counter confirms it, and the verdict says so (``killed: SIGKILL,
cgroup OOM``), at the phase it was in. Where no cgroup can be made the flag is refused.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import format_bytes
from offloadprobe.isolation.rows import Row
from offloadprobe.measure.cgroup import CgroupUnavailable, MemoryGroup, create_group
from offloadprobe.repro.children import GateKeeper
from offloadprobe.repro.host import LimitWindow


@dataclass(kw_only=True, slots=True)
class HostLimit:
    """One worker's limited group, the window that holds the limit, its gate keepers."""

    size: int
    group: MemoryGroup
    window: LimitWindow
    keepers: list[GateKeeper] = field(default_factory=list)

    def measure_options(self) -> dict[str, Any]:
        """What ``isolation.rows.measure`` takes to run the worker under the limit."""
        return {"cgroup": self.group, "gate": True, "on_started": self._started}

    def _started(self, job: Any) -> GateKeeper:
        keeper = GateKeeper(job.gate_dir, self.window)
        keeper.start()
        self.keepers.append(keeper)
        return keeper

    def note(self) -> str:
        """What the limit was, in words, for the run's notes."""
        errors = [e for k in self.keepers for e in k.errors]
        if self.window.limit is None or errors:
            why = "; ".join(errors) or "the worker never reached its first offload"
            return f"--host-limit {format_bytes(self.size)}: no limit was set ({why})"
        assert self.window.baseline is not None
        return (
            f"--host-limit {format_bytes(self.size)}: a real limit ({self.group.mechanism}) of "
            f"{format_bytes(self.window.limit)} = the worker's cgroup usage at the first "
            f"offload ({format_bytes(self.window.baseline)}) + {format_bytes(self.size)}, "
            "held from each offload to the end of its load"
        )

    def annotated(self, row: Row) -> Row:
        """``row`` with the limit's note on its run."""
        runs = [replace(run, notes=[*run.notes, self.note()]) for run in row.report.runs]
        return replace(row, report=replace(row.report, runs=runs))


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
