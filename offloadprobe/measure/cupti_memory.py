"""Every device and page-locked host allocation this process makes, by CUPTI.

PyTorch's counters see only PyTorch's allocators: pinned memory made by
``cudaHostAlloc`` in CuPy, or by a strategy's own ``cudaHostRegister``, is invisible to
``torch.cuda.host_memory_stats``, and device memory from another allocator shows only
as a total in ``mem_get_info``. Two routes through CUPTI (NVIDIA's profiling interface):

- ``MEMORY2`` activity records (through the optional ``cupti-python`` package: ``pip
  install 'offloadprobe[cupti]'``): each allocation and release the CUDA runtime and
  driver make, whoever asks for it: a timestamp, the memory kind (DEVICE, PINNED), the
  operation (ALLOCATION, RELEASE), the address and the size. On the H200 they missed the
  ``cudaHostRegister`` calls made on worker threads.
- API callbacks on the page-locking calls themselves (``cupti_calls``: libcupti through
  ctypes, no package needed beyond torch's own CUPTI library): on the calling thread,
  whichever thread it is.

:class:`MemoryLog` turns both into live bytes by kind, each page-locked range once
(``LOCKED``), and the peak of live bytes between two moments; :func:`start` begins
recording in this process before CUDA is first used, so nothing it holds was made
unseen. The arithmetic takes plain :class:`Allocation` events, so it is tested without a
GPU.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from dataclasses import dataclass
from typing import Any

DEVICE = "device"
PINNED = "pinned"
"""Page-locked host memory as ``MEMORY2`` records it."""
CALLS = "pinned calls"
"""Page-locked host ranges as the API callbacks saw each call return (``cudaHostAlloc``,
``cudaHostRegister`` and their driver twins, any thread; ``cupti_calls``)."""
LOCKED = "locked"
"""Page-locked host memory by both routes, each range once (:func:`_pinned_union`)."""
SLACK_NS = 1_000_000
"""How far outside a call a ``MEMORY2`` record of what it made may be stamped."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """One allocation (``size > 0``) or release (``size < 0``) at ``timestamp`` (ns)."""

    timestamp: int
    kind: str
    address: int
    size: int
    began: int | None = None
    """A call's entry (ns; ``timestamp`` is its return): the window in which CUPTI's own
    ``MEMORY2`` record of what the call made falls."""


def _pinned_union(events: list[Allocation]) -> list[Allocation]:
    """Page-locked host memory by both routes, each range once: the API callbacks' calls,
    and ``MEMORY2``'s pinned records less those of the same calls (a record stamped within
    a call over an overlapping range, and the release of its address)."""
    calls = [e for e in events if e.kind == CALLS and e.size > 0]
    twins: set[int] = set()
    out = []
    for e in events:
        if e.kind == CALLS:
            out.append(e)
        elif e.kind != PINNED:
            continue
        elif e.size < 0 and e.address in twins:
            twins.discard(e.address)
        elif e.size > 0 and any(_same_range(e, c) for c in calls):
            twins.add(e.address)
        else:
            out.append(e)
    return out


def _same_range(record: Allocation, call: Allocation) -> bool:
    began = call.timestamp if call.began is None else call.began
    return (
        began - SLACK_NS <= record.timestamp <= call.timestamp + SLACK_NS
        and record.address < call.address + call.size
        and call.address < record.address + record.size
    )


class MemoryLog:
    """Live bytes by kind over time, from allocation events in any order."""

    def __init__(self) -> None:
        self._events: list[Allocation] = []
        self._sorted = True
        self._lock = threading.Lock()
        self.unknown_releases = 0
        """Releases of addresses never seen allocated (made before recording began)."""

    def add(self, events: list[Allocation]) -> None:
        with self._lock:
            stamps = [e.timestamp for e in self._events[-1:] + events]
            if any(b < a for a, b in itertools.pairwise(stamps)):
                self._sorted = False  # the API callbacks' events come between the buffers'
            self._events.extend(events)

    def _series(self, kind: str) -> tuple[list[int], list[int]]:
        """Timestamps and live bytes just after each event of ``kind``."""
        with self._lock:
            if not self._sorted:
                self._events.sort(key=lambda e: e.timestamp)
                self._sorted = True
            events = list(self._events)
        events = _pinned_union(events) if kind == LOCKED else [e for e in events if e.kind == kind]
        live: dict[int, int] = {}
        times, totals, total, unknown = [], [], 0, 0
        for event in events:
            if event.size > 0:
                total += event.size - live.get(event.address, 0)
                live[event.address] = event.size
            elif event.address in live:
                total -= live.pop(event.address)
            else:
                unknown += 1
            times.append(event.timestamp)
            totals.append(total)
        self.unknown_releases = unknown
        return times, totals

    def live(self, kind: str, at: int | None = None) -> int:
        """Bytes of ``kind`` allocated and not released at ``at`` (ns; None: now)."""
        times, totals = self._series(kind)
        i = len(times) if at is None else bisect.bisect_right(times, at)
        return totals[i - 1] if i else 0

    def peak(self, kind: str, since: int, until: int | None = None) -> int:
        """The most bytes of ``kind`` live at any moment in ``[since, until]``."""
        times, totals = self._series(kind)
        first = bisect.bisect_right(times, since)
        last = len(times) if until is None else bisect.bisect_right(times, until)
        at_start = totals[first - 1] if first else 0
        return max([at_start, *totals[first:last]])


class _Recorder:
    """CUPTI's activity API, feeding a :class:`MemoryLog`."""

    def __init__(self, cupti: Any, log: MemoryLog | None = None) -> None:
        self.cupti = cupti
        self.log = MemoryLog() if log is None else log
        kinds = cupti.ActivityMemoryKind
        self.kinds = {int(kinds.DEVICE): DEVICE, int(kinds.PINNED): PINNED}
        ops = cupti.ActivityMemoryOperationType
        self.allocation, self.release = int(ops.ALLOCATION), int(ops.RELEASE)
        self.memory2 = int(cupti.ActivityKind.MEMORY2)

    def requested(self) -> tuple[int, int]:
        return 8 * 2**20, 0  # an 8 MiB buffer, records limited by size only

    def completed(self, activities: list[Any]) -> None:
        events = []
        for record in activities:
            if int(record.kind) != self.memory2:
                continue
            kind = self.kinds.get(int(record.memory_kind))
            op = int(record.memory_operation_type)
            if kind is None or op not in (self.allocation, self.release):
                continue
            size = int(record.bytes) if op == self.allocation else -1
            events.append(Allocation(int(record.timestamp), kind, int(record.address), size))
        self.log.add(events)

    def now(self) -> int:
        return int(self.cupti.get_timestamp())

    def flush(self) -> None:
        self.cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED


class PinnedSource:
    """What the pinned probe reads: a clock, a flush, and the log both routes feed."""

    def __init__(self, log: MemoryLog, recorder: _Recorder | None, calls: Any) -> None:
        self.log, self.recorder, self.calls = log, recorder, calls

    def now(self) -> int:
        return self.recorder.now() if self.recorder is not None else int(self.calls.now())

    def flush(self) -> None:
        if self.recorder is not None:
            self.recorder.flush()


_RECORDER: _Recorder | None = None
_PINNED: PinnedSource | None = None
_WHY_NOT = "not started"


def start() -> str:
    """Record every allocation from now on, by every route CUPTI grants here; a note for
    the output saying where the pinned figures come from. Call before CUDA is first used."""
    global _RECORDER, _PINNED, _WHY_NOT
    if _PINNED is not None:
        return _PINNED_NOTE[0]
    log, recorder = MemoryLog(), None
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except ImportError as err:  # the optional extra is not installed, or its library
        _WHY_NOT = f"cupti-python not importable ({err})"
    else:
        candidate = _Recorder(cupti, log)
        try:
            cupti.activity_register_callbacks(candidate.requested, candidate.completed)
            cupti.activity_enable(cupti.ActivityKind.MEMORY2)
            recorder = candidate
        except Exception as err:
            _WHY_NOT = f"CUPTI refused memory records ({err})"
    from offloadprobe.measure import cupti_calls

    calls, refused = cupti_calls.start(log)
    _RECORDER = recorder
    if recorder is None and calls is None:
        _PINNED_NOTE[0] = WITHOUT
        return WITHOUT
    _PINNED = PinnedSource(log, recorder, calls)
    if calls is None:
        note = f"{NOTE_RECORDS}; {refused}: page-locking on worker threads may be missed"
    elif recorder is None:
        note = NOTE_CALLS
    else:
        note = NOTE
    _PINNED_NOTE[0] = note
    return note


NOTE = (
    "pinned and device allocations recorded by CUPTI: pinned figures count any allocator "
    "and page-locking calls from any thread"
)
NOTE_RECORDS = "pinned and device allocations recorded by CUPTI: pinned figures count any allocator"
NOTE_CALLS = (
    "pinned figures: every page-locking call (cudaHostAlloc, cudaHostRegister) from any "
    "thread, by CUPTI's API callbacks; device memory outside PyTorch not recorded "
    "(pip install 'offloadprobe[cupti]')"
)
WITHOUT = (
    "pinned figures: PyTorch's host allocator and the strategies' declared "
    "cudaHostRegister bytes (CUPTI absent: pip install 'offloadprobe[cupti]')"
)
_PINNED_NOTE = [WITHOUT]


def active() -> _Recorder | None:
    """The ``MEMORY2`` recorder, once :func:`start` got it in this process."""
    return _RECORDER


def pinned() -> PinnedSource | None:
    """Where page-locked bytes are read by fact (``LOCKED`` of its log); None where CUPTI
    granted no route."""
    return _PINNED


def outside_pytorch(reserved: int) -> int | None:
    """Device bytes this process allocated outside PyTorch's caching allocator, whose
    reserved bytes are ``reserved``; None where CUPTI is not recording."""
    if _RECORDER is None:
        return None
    _RECORDER.flush()
    return max(0, _RECORDER.log.live(DEVICE) - reserved)


def why_not() -> str:
    return _WHY_NOT
