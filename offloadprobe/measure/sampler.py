"""A background thread that samples memory counters at about 1 kHz, with timestamps.

It runs only when a timeline was asked for (``--trace``/``--plot``); the exact
per-phase peaks never come from it (see ``measure.timeline``).

Sources, and why each is read the way it is (costs measured on the 2-core CI host,
see ``benchmarks/sampler_overhead.py``, which also reports them on the H200):

- host RSS, RssAnon, RssShmem: one ``pread`` of ``/proc/self/status`` on a descriptor
  kept open (about 10 us). ``/proc/self/statm`` is cheaper (about 1.3 us) but lumps
  RssShmem with RssFile, and ``/proc/self/smaps_rollup`` walks every mapping (about
  2.5 ms): neither is both exact and cheap.
- cgroup usage: one ``pread`` of ``memory.current`` (v2) or ``memory.usage_in_bytes``
  (v1), about 1 us.
- GPU allocated/reserved: ``torch.cuda.memory_allocated``/``memory_reserved``
  (allocator counters, no device call).
- pinned allocator bytes: ``torch.cuda.host_memory_stats`` (builds a dict).
- device memory in use: ``torch.cuda.mem_get_info`` (a driver call).

Every source's read cost is timed when the sampler starts; one slower than
``COST_FRACTION`` of the interval is read every n-th tick only, and the timeline's
notes say so. If the thread's own CPU time exceeds ``BUSY_LIMIT`` of one CPU, the
interval doubles, up to ``MAX_INTERVAL_NS`` (a guard against a pathological source).

The GIL: every read that enters the kernel releases it, and taking it back while the
measured code runs Python (a train step) waits for the 5 ms switch interval. So
during Python-heavy phases the samples come at about 100-200 Hz, and the measured
code only yields the GIL for a few microseconds per tick; during copies that run in
C++ without the GIL (offload, load) they come at the full rate. What that costs the
phases is measured, not assumed: ``benchmarks/sampler_overhead.py``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from offloadprobe.measure.probes.cgroup import locate
from offloadprobe.measure.timeline import SAMPLED_NOTE, PhaseSpan, Series, Timeline

INTERVAL_NS = 1_000_000
MAX_INTERVAL_NS = 16_000_000
COST_FRACTION = 0.02
"""A source may spend this fraction of each interval; a slower one is read less often."""
BUSY_LIMIT = 0.10
"""If the thread's own CPU time exceeds this fraction of one CPU, the interval doubles."""
BUSY_WINDOW_NS = 250_000_000


class Source(Protocol):
    """One read that yields one value per series it names (None: unreadable now)."""

    series: Sequence[tuple[str, str]]
    """``(name, label)`` per value ``read`` returns."""

    def read(self) -> Sequence[int] | None: ...


class StatusSource:
    """RSS, RssAnon and RssShmem from one read of ``/proc/self/status``."""

    series = (("host.rss", "host RSS"), ("host.anon", "RssAnon"), ("host.shmem", "RssShmem"))
    _KEYS = (b"VmRSS:", b"RssAnon:", b"RssShmem:")

    def __init__(self, path: str = "/proc/self/status") -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def read(self) -> Sequence[int] | None:
        text = os.pread(self.fd, 8192, 0)
        out = []
        for key in self._KEYS:
            start = text.find(key)
            if start < 0:
                return None
            start += len(key)
            out.append(int(text[start : text.index(b"kB", start)]) * 1024)
        return out

    def close(self) -> None:
        os.close(self.fd)


class FileSource:
    """One integer file, e.g. the cgroup's ``memory.current``."""

    def __init__(self, path: str, name: str, label: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.series = ((name, label),)

    def read(self) -> Sequence[int] | None:
        return (int(os.pread(self.fd, 64, 0)),)

    def close(self) -> None:
        os.close(self.fd)


class CallSource:
    """Values computed by a function (the torch.cuda counters)."""

    def __init__(self, series: Sequence[tuple[str, str]], fn: Callable[[], Sequence[int]]):
        self.series = tuple(series)
        self.fn = fn

    def read(self) -> Sequence[int] | None:
        return self.fn()


def cgroup_source() -> FileSource | None:
    files = locate()
    if files is None:
        return None
    try:
        return FileSource(str(files.current), "cgroup.current", "cgroup usage")
    except OSError:
        return None


def cuda_sources(device: int = 0) -> list[CallSource]:
    """Allocator, pinned-allocator and driver counters; reads wait for CUDA's own init."""
    import torch

    from offloadprobe.measure.probes.pinned import normalise

    cuda = torch.cuda

    def allocator() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        return cuda.memory_allocated(device), cuda.memory_reserved(device)

    def pinned() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        reserved, in_use, _, _ = normalise(cuda.host_memory_stats())
        return reserved, in_use

    def used() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        free, total = cuda.mem_get_info(device)
        return (total - free,)

    gpu_series = (("gpu.allocated", "GPU allocated"), ("gpu.reserved", "GPU reserved"))
    pinned_series = (("pinned.reserved", "pinned reserved"), ("pinned.in_use", "pinned in use"))
    sources = [CallSource(gpu_series, allocator)]
    if hasattr(cuda, "host_memory_stats"):
        sources.append(CallSource(pinned_series, pinned))
    sources.append(CallSource((("gpu.device_used", "device memory in use"),), used))
    return sources


def default_sources(cuda: bool) -> list[Source]:
    """Host and cgroup always; the CUDA counters when the run uses a GPU."""
    sources: list[Source] = [StatusSource()]
    cgroup = cgroup_source()
    if cgroup is not None:
        sources.append(cgroup)
    if cuda:
        sources += cuda_sources()
    return sources


def read_cost_ns(source: Source, reads: int = 20, clock=time.perf_counter_ns) -> int:
    """Median time of one read."""
    costs = []
    for _ in range(reads):
        start = clock()
        source.read()
        costs.append(clock() - start)
    return sorted(costs)[len(costs) // 2]


class Sampler:
    """Samples ``sources`` on a daemon thread until ``stop``; marks phase spans."""

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        interval_ns: int = INTERVAL_NS,
        clock: Callable[[], int] = time.perf_counter_ns,
        rank: int | None = None,
    ) -> None:
        self.sources = list(sources)
        self.interval_ns = interval_ns
        self.clock = clock
        self.epoch = clock()
        self.every = [1] * len(self.sources)
        self.series = [[Series(name=n, label=label) for n, label in s.series] for s in self.sources]
        self.timeline = Timeline(
            interval_ns=interval_ns,
            series=[x for group in self.series for x in group],
            rank=int(os.environ.get("RANK", "0")) if rank is None else rank,
            notes=[SAMPLED_NOTE],
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.busy_ns = 0

    def now(self) -> int:
        """Nanoseconds since this sampler's epoch."""
        return self.clock() - self.epoch

    def span(self, cycle: int, phase: str, start_ns: int, end_ns: int) -> None:
        self.timeline.spans.append(
            PhaseSpan(cycle=cycle, phase=phase, start_ns=start_ns, end_ns=end_ns)
        )

    def calibrate(self) -> None:
        """Read each source slower than its share of the interval every n-th tick only."""
        for index, source in enumerate(self.sources):
            cost = read_cost_ns(source, clock=self.clock)
            every = max(1, math.ceil(cost / (COST_FRACTION * self.interval_ns)))
            self.every[index] = every
            for series in self.series[index]:
                series.every = every
            if every > 1:
                names = ", ".join(label for _, label in source.series)
                self.timeline.notes.append(
                    f"{names}: one read takes {cost / 1000:.0f} us, so sampled every "
                    f"{every * self.interval_ns / 1e6:g} ms"
                )

    def tick(self, count: int, *, every_source: bool = False) -> None:
        t = self.now()
        for index, source in enumerate(self.sources):
            if count % self.every[index] and not every_source:
                continue
            values = source.read()
            if values is None:
                continue
            for series, value in zip(self.series[index], values, strict=True):
                series.append(t, int(value))
        self.timeline.ticks = count + 1
        self.timeline.end_ns = t

    def _loop(self) -> None:
        count, window_start, window_busy = 1, self.clock(), 0
        deadline = window_start
        while not self._stop.is_set():
            start, cpu = self.clock(), time.thread_time_ns()
            self.tick(count)
            count += 1
            spent = time.thread_time_ns() - cpu
            window_busy += spent
            self.busy_ns += spent
            if start - window_start >= BUSY_WINDOW_NS:
                if window_busy > BUSY_LIMIT * (start - window_start) and (
                    self.interval_ns < MAX_INTERVAL_NS
                ):
                    self.interval_ns *= 2
                    self.timeline.notes.append(
                        f"sampler slowed to every {self.interval_ns / 1e6:g} ms "
                        f"(its reads took {window_busy / (start - window_start):.1%} of a CPU)"
                    )
                window_start, window_busy = start, 0
            deadline = max(deadline + self.interval_ns, self.clock())
            self._stop.wait((deadline - self.clock()) / 1e9)

    def start(self) -> Sampler:
        self.calibrate()
        self.tick(0)
        self._thread = threading.Thread(target=self._loop, name="offloadprobe-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Timeline:
        """Stop the thread, take a last sample and return the timeline."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.tick(self.timeline.ticks, every_source=True)
        self.timeline.interval_ns = self.interval_ns
        for source in self.sources:
            close = getattr(source, "close", None)
            if callable(close):
                close()
        return self.timeline

    @property
    def running(self) -> bool:
        return self._thread is not None
