"""CUPTI's allocation records turned into live and peak bytes by kind (fakes: exact)."""

from __future__ import annotations

import enum
from types import SimpleNamespace

from offloadprobe.measure import cupti_memory
from offloadprobe.measure.cupti_memory import (
    CALLS,
    DEVICE,
    LOCKED,
    PINNED,
    Allocation,
    MemoryLog,
)

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

    from offloadprobe.measure import cupti_calls

    monkeypatch.setattr(cupti_memory, "_RECORDER", None)
    monkeypatch.setattr(cupti_memory, "_PINNED", None)
    monkeypatch.setattr(cupti_calls, "start", lambda log: (None, "no libcupti found"))
    monkeypatch.setattr(builtins, "__import__", no_cupti)
    assert cupti_memory.start() == cupti_memory.WITHOUT
    assert cupti_memory.active() is None and "cupti-python" in cupti_memory.why_not()
    assert cupti_memory.pinned() is None


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


# -- host registrations from any thread (CUPTI API callbacks) --------------------------
def test_each_page_locked_range_counts_once_whichever_routes_saw_it():
    """A registration the API callbacks saw and MEMORY2 recorded too counts once; one
    MEMORY2 missed (a worker thread's, as on the H200) counts by the callbacks alone;
    a cudaHostAlloc block only MEMORY2 sees still counts."""
    ms, log = 10**6, MemoryLog()  # CUPTI's clock is in ns
    log.add(
        [
            Allocation(10 * ms, PINNED, 1 << 30, 4 * MiB),  # cudaHostAlloc: MEMORY2 only
            Allocation(21 * ms, PINNED, 2 << 30, 8 * MiB),  # MEMORY2's record of a registration
            Allocation(25 * ms, CALLS, 2 << 30, 8 * MiB, began=20 * ms),  # the callbacks'
            Allocation(40 * ms, CALLS, 3 << 30, 64 * MiB, began=30 * ms),  # MEMORY2 missed
        ]
    )
    assert log.live(LOCKED) == (4 + 8 + 64) * MiB
    assert log.live(CALLS) == (8 + 64) * MiB and log.live(PINNED) == (4 + 8) * MiB
    log.add([Allocation(50 * ms, PINNED, 2 << 30, -1), Allocation(51 * ms, CALLS, 2 << 30, -1)])
    assert log.live(LOCKED) == (4 + 64) * MiB
    assert log.peak(LOCKED, since=0) == (4 + 8 + 64) * MiB
    # a later cudaHostAlloc at a freed registration's address is its own block
    log.add([Allocation(60 * ms, PINNED, 2 << 30, 2 * MiB)])
    assert log.live(LOCKED) == (4 + 64 + 2) * MiB


def _calls_route():
    from offloadprobe.measure import cupti_calls

    clock = iter(range(10**9, 10**12, 10**6))  # CUPTI's clock, ns
    log = MemoryLog()
    return cupti_calls, log, cupti_calls.PageLockingCalls(log, lambda: next(clock))


def _call(route, domain, cbid, params, result=0):
    """CUPTI's entry and return callbacks for one call, with a real CUpti_CallbackData
    and params struct in memory, on the calling thread (as CUPTI makes them)."""
    import ctypes

    from offloadprobe.measure.cupti_calls import CALLS_BY_ID, ENTER, EXIT, CallbackData

    value = ctypes.c_int(result)
    name = CALLS_BY_ID[domain, cbid].name.encode()
    for site in (ENTER, EXIT):
        data = CallbackData(site, name, ctypes.addressof(params), ctypes.addressof(value))
        route.handle(None, domain, cbid, ctypes.addressof(data))


def test_page_locking_on_worker_threads_is_counted_by_the_api_callbacks():
    """A thread pool registers four chunks (the runtime's cudaHostRegister and the driver
    call inside it, each seen); a failed call and an unregister; cudaHostAlloc's pointer
    is read where the call wrote it."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    calls, log, route = _calls_route()
    chunk = 64 * MiB
    buffers = [ctypes.create_string_buffer(16) for _ in range(4)]  # stand-in addresses

    def register(i):
        params = calls.PointerSize(ctypes.addressof(buffers[i]), chunk)
        _call(route, calls.RUNTIME, 152, params)  # cudaHostRegister
        _call(route, calls.DRIVER, 379, params)  # cuMemHostRegister_v2 inside it

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(register, range(4)))
    assert route.problem is None and route.calls == 8
    assert log.live(LOCKED) == log.live(CALLS) == 4 * chunk  # each range once
    failed = calls.PointerSize(ctypes.addressof(ctypes.create_string_buffer(16)), chunk)
    _call(route, calls.RUNTIME, 152, failed, result=2)  # cudaErrorMemoryAllocation
    assert log.live(LOCKED) == 4 * chunk
    made = ctypes.create_string_buffer(16)
    out = ctypes.c_void_p(ctypes.addressof(made))  # where cudaHostAlloc wrote its pointer
    _call(route, calls.RUNTIME, 27, calls.PointerSize(ctypes.addressof(out), 2 * MiB))
    assert log.live(LOCKED) == 4 * chunk + 2 * MiB
    _call(route, calls.RUNTIME, 153, calls.Pointer(ctypes.addressof(buffers[0])))
    _call(route, calls.RUNTIME, 26, calls.Pointer(ctypes.addressof(made)))  # cudaFreeHost
    assert log.live(LOCKED) == 3 * chunk and log.peak(LOCKED, since=0) == 4 * chunk + 2 * MiB


def test_a_memory2_record_of_a_call_the_callbacks_saw_counts_once():
    import ctypes

    calls, log, route = _calls_route()
    buffer = ctypes.create_string_buffer(16)
    _call(route, calls.RUNTIME, 152, calls.PointerSize(ctypes.addressof(buffer), 8 * MiB))
    stamp = log.live(CALLS) and next(e.timestamp for e in log._events)
    log.add([Allocation(stamp - 10, PINNED, ctypes.addressof(buffer), 8 * MiB)])
    assert log.live(PINNED) == log.live(LOCKED) == 8 * MiB


def test_a_callback_that_fails_stops_the_route_and_says_why(monkeypatch):
    import ctypes

    calls, log, route = _calls_route()

    def broken(call, cbdata):
        raise ValueError("unreadable")

    monkeypatch.setattr(route, "_handle", broken)
    route.handle(None, calls.RUNTIME, 152, 1)  # CUPTI gets no exception back
    assert "unreadable" in route.problem
    monkeypatch.undo()
    buffer = ctypes.create_string_buffer(16)
    _call(route, calls.RUNTIME, 152, calls.PointerSize(ctypes.addressof(buffer), MiB))
    assert log.live(LOCKED) == 0  # stopped: the figure is then CUPTI's records alone


def test_libcupti_is_the_loaded_copy_first():
    from offloadprobe.measure.cupti_calls import find_libcupti

    maps = (
        "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /site/nvidia/cu13/lib/libcupti.so.13\n"
    )
    assert find_libcupti(maps) == "/site/nvidia/cu13/lib/libcupti.so.13"


def test_the_pinned_probe_reads_page_locking_from_worker_threads_by_fact(monkeypatch):
    """The pinned probe's by-fact figure (``locked_after``, ``locked_peak``) is every
    route's: here the API callbacks alone (no cupti-python), fed from pool threads."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    from offloadprobe.measure.probes.pinned import PinnedProbe

    calls, log, route = _calls_route()
    monkeypatch.setattr(cupti_memory, "_PINNED", cupti_memory.PinnedSource(log, None, route))
    import torch

    monkeypatch.setattr(torch.cuda, "reset_peak_host_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "host_memory_stats", lambda: {})  # PyTorch's: nothing
    probe = PinnedProbe(enabled=True)
    probe.begin()
    buffers = [ctypes.create_string_buffer(16) for _ in range(3)]
    params = [calls.PointerSize(ctypes.addressof(b), 32 * MiB) for b in buffers]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda p: _call(route, calls.RUNTIME, 152, p), params))
    reading = probe.end()
    assert reading is not None and reading.reserved_after == 0
    assert reading.locked_after == reading.locked_peak == 3 * 32 * MiB
