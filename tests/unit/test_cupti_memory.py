"""CUPTI's allocation records turned into live and peak bytes by kind (fakes: exact)."""

from __future__ import annotations

import enum
from types import SimpleNamespace

from offloadprobe.measure import cupti_memory
from offloadprobe.measure.cupti_memory import DEVICE, PINNED, Allocation, MemoryLog

MiB = 2**20


def test_live_and_peak_follow_allocations_and_releases_by_address():
    log = MemoryLog()
    log.add(
        [
            Allocation(10, PINNED, 0xA, 8 * MiB),
            Allocation(20, PINNED, 0xB, 4 * MiB),
            Allocation(25, DEVICE, 0xC, 64 * MiB),
            Allocation(30, PINNED, 0xA, -1),  # a release names the address only
            Allocation(40, PINNED, 0xD, 2 * MiB),
        ]
    )
    assert log.live(PINNED) == 6 * MiB and log.live(DEVICE) == 64 * MiB
    assert log.live(PINNED, at=5) == 0 and log.live(PINNED, at=20) == 12 * MiB
    # the peak inside a window includes what was live when it opened
    assert log.peak(PINNED, since=15) == 12 * MiB
    assert log.peak(PINNED, since=30) == 6 * MiB
    assert log.peak(PINNED, since=30, until=35) == 4 * MiB


def test_records_out_of_order_and_unknown_releases():
    log = MemoryLog()
    log.add([Allocation(50, PINNED, 0xA, -1)])  # made before recording began
    log.add([Allocation(20, PINNED, 0xB, 4 * MiB), Allocation(10, PINNED, 0xC, MiB)])
    assert log.live(PINNED) == 5 * MiB and log.live(PINNED, at=15) == MiB
    assert log.unknown_releases == 1


class _Kind(enum.IntEnum):
    MEMORY2 = 49
    KERNEL = 3


class _MemKind(enum.IntEnum):
    DEVICE = 2
    PINNED = 1
    PAGEABLE = 0


class _Op(enum.IntEnum):
    INVALID = 0
    ALLOCATION = 1
    RELEASE = 2


def _fake_cupti() -> SimpleNamespace:
    return SimpleNamespace(
        ActivityKind=_Kind,
        ActivityMemoryKind=_MemKind,
        ActivityMemoryOperationType=_Op,
        get_timestamp=lambda: 100,
        activity_flush_all=lambda flag: None,
    )


def _record(kind, mem, op, address, size, ts):
    return SimpleNamespace(
        kind=kind,
        memory_kind=mem,
        memory_operation_type=op,
        address=address,
        bytes=size,
        timestamp=ts,
    )


def test_recorder_keeps_device_and_pinned_memory2_records_only():
    recorder = cupti_memory._Recorder(_fake_cupti())
    recorder.completed(
        [
            _record(_Kind.MEMORY2, _MemKind.PINNED, _Op.ALLOCATION, 1, 16 * MiB, 1),
            _record(_Kind.MEMORY2, _MemKind.DEVICE, _Op.ALLOCATION, 2, 32 * MiB, 2),
            _record(_Kind.MEMORY2, _MemKind.PAGEABLE, _Op.ALLOCATION, 3, MiB, 3),
            _record(_Kind.KERNEL, _MemKind.PINNED, _Op.ALLOCATION, 4, MiB, 4),
            _record(_Kind.MEMORY2, _MemKind.DEVICE, _Op.RELEASE, 2, 32 * MiB, 5),
        ]
    )
    assert recorder.log.live(PINNED) == 16 * MiB and recorder.log.live(DEVICE) == 0
    assert recorder.log.peak(DEVICE, since=0) == 32 * MiB
    assert recorder.requested()[0] > 0 and recorder.now() == 100


def test_start_without_cupti_says_where_pinned_figures_come_from(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cupti(name, *args, **kwargs):
        if name == "cupti":
            raise ImportError("No module named 'cupti'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(cupti_memory, "_RECORDER", None)
    monkeypatch.setattr(builtins, "__import__", no_cupti)
    assert cupti_memory.start() == cupti_memory.WITHOUT
    assert cupti_memory.active() is None and "cupti-python" in cupti_memory.why_not()


def test_the_pinned_line_says_what_it_counts_and_how_the_sources_compare():
    from offloadprobe.core.records import RunSummary
    from offloadprobe.report.run_summary import _pinned_line

    def summary(source, pinned, recorded):
        return RunSummary(
            host_peak_bytes=0,
            host_peak_x=0.0,
            steady_host_bytes=0,
            steady_host_x=0.0,
            pinned_reserved_bytes=pinned,
            gpu_left_after_offload_bytes=0,
            offload_gbps=None,
            load_gbps=None,
            first_offload_gbps=None,
            first_load_gbps=None,
            integrity_ok=True,
            pinned_source=source,
            pinned_recorded_bytes=recorded,
        )

    by_fact = _pinned_line(summary("cupti", 64 * MiB, 64 * MiB))
    assert "64.00 MiB" in by_fact and "any allocator, CUPTI" in by_fact
    assert "recorded" not in by_fact
    # declared or allocator bytes CUPTI did not record: both figures are shown
    over = _pinned_line(summary("cupti", 64 * MiB, 8 * MiB))
    assert "CUPTI recorded 8.00 MiB" in over and over.startswith(
        "pinned after the last offload: 64.00 MiB"
    )
    assert "CUPTI would see any allocator" in _pinned_line(summary("allocator", MiB, None))


def test_page_cache_leaves_shared_memory_in_the_held_bytes():
    """cgroup v2's ``file`` and v1's ``cache`` both count shmem (tmpfs, /dev/shm, and on
    gVisor torch's pinned blocks): it is held, not page cache."""
    from offloadprobe.measure.probes.cgroup import _file

    assert _file({"file": 10 * MiB, "shmem": 8 * MiB, "anon": MiB}) == 2 * MiB
    assert _file({"cache": 10 * MiB, "shmem": 8 * MiB}) == 2 * MiB
    assert _file({"anon": MiB}) is None


def test_outside_pytorch_is_the_recorded_device_bytes_beyond_the_reserved(monkeypatch):
    recorder = cupti_memory._Recorder(_fake_cupti())
    recorder.completed([_record(_Kind.MEMORY2, _MemKind.DEVICE, _Op.ALLOCATION, 2, 96 * MiB, 1)])
    monkeypatch.setattr(cupti_memory, "_RECORDER", None)
    assert cupti_memory.outside_pytorch(64 * MiB) is None  # not recording: unknown
    monkeypatch.setattr(cupti_memory, "_RECORDER", recorder)
    assert cupti_memory.outside_pytorch(64 * MiB) == 32 * MiB
    assert cupti_memory.outside_pytorch(128 * MiB) == 0
