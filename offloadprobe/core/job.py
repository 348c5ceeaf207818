"""The worker protocol's two records: the job a parent hands a worker, and its result.

Every measured process is a worker (``python -m offloadprobe.engine.worker JOB``) that a
parent started: ``run`` in the foreground, each ``compare`` and ``repro`` row, the
pytest plugin's runs, and every rank. The worker reads one versioned job file and writes
one result file, both JSON, both in the work folder the parent made and removes. Nothing
else carries configuration: no environment variable, no flag.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from offloadprobe.core.config import RunConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.outcomes import Failure

JOB_VERSION = 1
RESULT_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSpec:
    """Ranks the worker starts through torchrun's launcher (``elastic_launch``)."""

    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous (several nodes); a free local port otherwise."""
    run_id: str = ""
    """The rendezvous id (every node derives the same one from the endpoint)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """Everything one worker needs: what to run and where to write it."""

    config: RunConfig
    workdir: str
    """The folder the parent made for this worker: job, result, phase log, timeline."""
    launch: LaunchSpec | None = None
    """Set: this worker starts the ranks (each a worker of this job with ``rank_job``)."""
    rank_of_launch: bool = False
    """This worker is one rank the launcher started: it writes a rank's result file."""
    gate: bool = False
    """Pause at every offload's start and load's end until the parent lets go (``repro``)."""
    timeline: bool = False
    """Sample memory over time into ``timeline.json`` (``--trace``/``--plot``)."""
    node_cgroup: str | None = None
    """Ranks: the node's memory cgroup the parent made (every rank runs in it)."""
    node_cgroup_missing: str | None = None
    """Ranks: why the parent could not make one."""
    dynamo_disabled_by_user: bool = False
    """The user set ``TORCHDYNAMO_DISABLE`` themselves (CPU emulation then leaves it)."""
    progress: bool = False
    """The parent shows a progress bar from the phase log (nothing changes in the worker)."""
    own_cgroup: str | None = None
    """The memory cgroup the parent made for this worker alone (it and all it starts):
    its figures govern the host readings."""
    cgroup_missing: str | None = None
    """Why the parent could not make one (host figures then come from the process tree)."""
    rank_cgroups: str | None = None
    """Ranks our launcher starts: the node group below which it made a memory cgroup for
    each rank; every rank waits until the launcher has moved it into its own."""
    rank_cgroups_missing: str | None = None
    """Ranks our launcher starts: why it could not make them a group each."""
    channel: str | None = None
    """The UNIX socket the parent listens on (``isolation.warden``): marks, integrity
    problems and the result go there as they happen (``engine.channel``)."""
    peaks_by_parent: bool = False
    """The parent resets and reads the group's peak at every phase mark: the worker
    leaves the group's peak counter alone."""
    version: int = JOB_VERSION

    @property
    def folder(self) -> Path:
        return Path(self.workdir)

    def result_path(self, rank: int | None = None) -> Path:
        return self.folder / ("result.json" if rank is None else f"result-rank{rank}.json")

    def phase_log(self, rank: int | None = None) -> Path:
        return self.folder / ("phases.jsonl" if not rank else f"phases-rank{rank}.jsonl")

    @property
    def gate_dir(self) -> Path:
        return self.folder / "gate"

    @property
    def timeline_path(self) -> Path:
        return self.folder / "timeline.json"

    @property
    def path(self) -> Path:
        return self.folder / ("job.json" if not self.rank_of_launch else "rank-job.json")

    def rank_job(self) -> Job:
        """The job every rank the launcher starts reads."""
        return replace(self, launch=None, rank_of_launch=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(self.to_dict()))
        return self.path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        version = data.get("version")
        if version != JOB_VERSION:
            raise UsageError(
                f"job file version {version!r}: this offloadprobe reads version {JOB_VERSION}; "
                "the parent and the worker must be the same offloadprobe"
            )
        fields = dict(data)
        fields["config"] = RunConfig.from_dict(fields["config"])
        if fields.get("launch"):
            fields["launch"] = LaunchSpec(**fields["launch"])
        return cls(**fields)

    @classmethod
    def read(cls, path: Path) -> Job:
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise UsageError(f"{path}: not an offloadprobe job ({exc})") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerResult:
    """What a worker measured (the report's facts, not judged) or why it could not."""

    exit_code: int
    """The exit status the worker ends with right after writing this; the parent checks
    that the process really ended so (else the record is ``inconsistent``)."""
    report: dict[str, Any] | None = None
    """``Report.to_dict()`` of the run, rank 0's world report for ranks; None when the
    worker failed before it had one, and for ranks other than 0."""
    failure: Failure | None = None
    """Bad input, or a crash outside the measured cycles (the run's own failures are in
    the report's record)."""
    pid: int = field(default_factory=os.getpid)
    version: int = RESULT_VERSION

    def write(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> WorkerResult | None:
        """The result, or None where the worker wrote none (or something unreadable)."""
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    @classmethod
    def from_dict(cls, data: Any) -> WorkerResult | None:
        """The result from its JSON form (as written, or as sent to the parent), or None
        where it is not one."""
        try:
            fields = dict(data)
            fields["failure"] = Failure(**data["failure"]) if data.get("failure") else None
            if fields.get("version") != RESULT_VERSION:
                return None
            return cls(**fields)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader never
    sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
