"""Hand-made attach records with exact figures, for the verdict and reporter tests."""

from __future__ import annotations

from dataclasses import replace

from offloadprobe.attach.collect import (
    NodeMemory,
    summarise_growth,
    summarise_nodes,
    summarise_phase,
    summarise_ranks,
)
from offloadprobe.attach.records import Call, Escaped, JobRecord, Process, Uninstrumented

MIB = 1024**2
GIB = 1024**3


def call(
    phase: str,
    index: int,
    *,
    rank: int = 0,
    pid: int = 4100,
    peak: int,
    growth: int,
    moved: int | None,
    start: float,
    gpu: bool = True,
    before: int | None = None,
) -> Call:
    before = 2 * GIB + rank * MIB if before is None else before
    allocated = 10 * GIB
    return Call(
        phase=phase,
        target=f"offload_pairs:{phase}_model_pre",
        pid=pid,
        host="vm0",
        rank=rank,
        local_rank=rank,
        node_rank=0,
        index=index,
        depth=0,
        parent=None,
        thread="MainThread",
        start_time=1000.0 + start,
        seconds=0.25,
        raised=False,
        error=None,
        host_before_bytes=before,
        host_after_bytes=before + growth,
        rss_peak_bytes=peak,
        host_peak_method="vmhwm",
        pinned_source="torch.cuda.host_memory_stats" if gpu else None,
        pinned_before_bytes=32 * MIB if gpu else None,
        pinned_after_bytes=64 * MIB if gpu else None,
        pinned_in_use_after_bytes=32 * MIB if gpu else None,
        gpu_device=rank if gpu else None,
        gpu_allocated_before_bytes=allocated if gpu else None,
        gpu_allocated_after_bytes=(allocated - moved if phase == "offload" else allocated + moved)
        if gpu and moved is not None
        else None,
        node_peak_after_bytes=GIB + int(start) * MIB,
    )


def calls(gpu: bool = True) -> list[Call]:
    """Two cycles of a pre-fix pair, one after the other: each call starts at the RSS the
    one before left (the first offload keeps its copy, the second load leaks 4 MiB)."""
    out: list[Call] = []
    rss = 2 * GIB
    for phase, index, peak, growth, moved in (
        ("offload", 1, 32 * MIB, 32 * MIB, 32 * MIB),
        ("load", 1, 0, 0, None),
        ("offload", 2, 64 * MIB, 0, 32 * MIB),
        ("load", 2, 4 * MIB, 4 * MIB, 32 * MIB),
    ):
        out.append(
            call(
                phase,
                index,
                peak=peak,
                growth=growth,
                moved=moved,
                start=len(out),
                gpu=gpu,
                before=rss,
            )
        )
        rss += growth
    return out


def _grouped(c: Call) -> Call:
    """The call with its process's cgroup read by the parent: 1 MiB more than RSS
    throughout, and offload #2 wrote a 32 MiB copy into a memfd that no RSS shows."""
    memfd = 32 * MIB if (c.phase, c.index) == ("offload", 2) else 0
    return replace(
        c,
        group_before_bytes=c.host_before_bytes + MIB,
        group_after_bytes=c.host_after_bytes + MIB + memfd,
        group_peak_bytes=c.rss_peak_bytes + memfd,
    )


def tricked() -> JobRecord:
    """A job that hid from its RSS three ways: a copy in a memfd (its cgroup saw it), a
    re-exec without the bootstrap, and a process that left its cgroup (the peak of the
    job's group reset inside it, too)."""
    record = job(gpu=False, grouped=True, require_calls=True)
    return replace(
        record,
        uninstrumented=(
            Uninstrumented(
                pid=4100,
                ppid=4000,
                command="python train_offload.py",
                seen_by="process tree",
                after_exec=True,
            ),
        ),
        escaped=(
            Escaped(
                pid=4300,
                command="python helper.py",
                left="/job/offloadprobe-attach-0/p4100",
                found_in="/job",
                rss_bytes=GIB,
            ),
        ),
        peak_resets=("offloadprobe-attach-0",),
    )


def job(
    *,
    exit_code: int = 0,
    require_calls: bool = False,
    never: bool = False,
    never_status: str = "module never imported",
    gpu: bool = True,
    ranks: int = 1,
    grouped: bool = False,
) -> JobRecord:
    all_calls = calls(gpu)
    if grouped:
        all_calls = [_grouped(c) for c in all_calls]
    for rank in range(1, ranks):
        all_calls += [
            replace(c, rank=rank, pid=4100 + rank, rss_peak_bytes=c.rss_peak_bytes // 2)
            for c in calls(gpu)
        ]
    all_calls.sort(key=lambda c: (c.start_time, c.rank))
    phases = [
        summarise_phase(
            name,
            f"offload_pairs:{name}_model_pre",
            None,
            [c for c in all_calls if c.phase == name],
            "called",
        )
        for name in ("offload", "load")
    ]
    if never:
        phases.append(
            summarise_phase(
                "tms_pause",
                "torch_memory_saver.entrypoint:TorchMemorySaver.pause",
                "torch-memory-saver",
                [],
                never_status,
            )
        )
    processes = [
        Process(
            pid=4100 + r,
            ppid=4000,
            host="vm0",
            how="sitecustomize",
            argv=("train_offload.py",),
            rank=r,
            local_rank=r,
            started=999.0,
            exited=True,
            calls=4,
            wrapped=("offload", "load"),
            skipped=(),
        )
        for r in range(ranks)
    ]
    memory = NodeMemory(
        host="vm0", peak_bytes=5 * GIB, method="cgroup v1 memory.max_usage_in_bytes"
    )
    return JobRecord(
        command=("python", "examples/attach/train_offload.py", "--offload", "pre"),
        exit_code=exit_code,
        seconds=12.5,
        out_dir=None,
        calls=tuple(all_calls),
        phases=tuple(phases),
        ranks=tuple(summarise_ranks(all_calls)),
        nodes=tuple(summarise_nodes(processes, all_calls, memory)),
        processes=tuple(processes),
        uninstrumented=(
            Uninstrumented(
                pid=4200, ppid=4100, command="python -I -c pass", seen_by="process tree"
            ),
        ),
        growth=tuple(summarise_growth(all_calls)),
        notes=("a note",),
        require_calls=require_calls,
    )
