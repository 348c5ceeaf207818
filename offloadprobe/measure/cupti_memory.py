"""Every device and page-locked host allocation this process makes, by CUPTI's records.

PyTorch's counters see only PyTorch's allocators: pinned memory made by
``cudaHostAlloc`` in CuPy, or by a strategy's own ``cudaHostRegister``, is invisible to
``torch.cuda.host_memory_stats``, and device memory from another allocator shows only
as a total in ``mem_get_info``. CUPTI (NVIDIA's profiling interface, through the
optional ``cupti-python`` package: ``pip install 'offloadprobe[cupti]'``) records each
allocation and release the CUDA runtime and driver make, whoever asks for it, as a
``MEMORY2`` activity record: a timestamp, the memory kind (DEVICE, PINNED), the
operation (ALLOCATION, RELEASE), the address and the size.

:class:`MemoryLog` turns the records into live bytes by kind, and the peak of live
bytes between two moments; :func:`start` begins recording in this process before
CUDA is first used, so nothing it holds was made unseen. The arithmetic takes plain
:class:`Allocation` events, so it is tested without a GPU.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Any

DEVICE = "device"
PINNED = "pinned"


@dataclass(frozen=True, slots=True)
class Allocation:
    """One allocation (``size > 0``) or release (``size < 0``) at ``timestamp`` (ns)."""

    timestamp: int
    kind: str
    address: int
    size: int


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
            if events and self._events and events[0].timestamp < self._events[-1].timestamp:
                self._sorted = False
            self._events.extend(events)

    def _series(self, kind: str) -> tuple[list[int], list[int]]:
        """Timestamps and live bytes just after each event of ``kind``."""
        with self._lock:
            if not self._sorted:
                self._events.sort(key=lambda e: e.timestamp)
                self._sorted = True
            events = [e for e in self._events if e.kind == kind]
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

    def __init__(self, cupti: Any) -> None:
        self.cupti = cupti
        self.log = MemoryLog()
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


_RECORDER: _Recorder | None = None
_WHY_NOT = "not started"


def start() -> str:
    """Record every allocation from now on; a note for the output, saying which source
    the pinned figures have. Call before CUDA is first used."""
    global _RECORDER, _WHY_NOT
    if _RECORDER is not None:
        return NOTE
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except ImportError as err:  # the optional extra is not installed, or its library
        _WHY_NOT = f"cupti-python not importable ({err})"
        return WITHOUT
    recorder = _Recorder(cupti)
    try:
        cupti.activity_register_callbacks(recorder.requested, recorder.completed)
        cupti.activity_enable(cupti.ActivityKind.MEMORY2)
    except Exception as err:
        _WHY_NOT = f"CUPTI refused memory records ({err})"
        return WITHOUT
    _RECORDER = recorder
    return NOTE


NOTE = "pinned and device allocations recorded by CUPTI: pinned figures count any allocator"
WITHOUT = (
    "pinned figures: PyTorch's host allocator and the strategies' declared "
    "cudaHostRegister bytes (CUPTI absent: pip install 'offloadprobe[cupti]')"
)


def active() -> _Recorder | None:
    """The recorder, once :func:`start` succeeded in this process."""
    return _RECORDER


def outside_pytorch(reserved: int) -> int | None:
    """Device bytes this process allocated outside PyTorch's caching allocator, whose
    reserved bytes are ``reserved``; None where CUPTI is not recording."""
    if _RECORDER is None:
        return None
    _RECORDER.flush()
    return max(0, _RECORDER.log.live(DEVICE) - reserved)


def why_not() -> str:
    return _WHY_NOT
