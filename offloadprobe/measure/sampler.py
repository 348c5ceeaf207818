"""Sample memory counters at about 1 kHz, with timestamps, beside a running phase.

It runs only when a timeline was asked for (``--trace``/``--plot``); the exact
per-phase peaks never come from it (see ``measure.timeline``).

Host RSS, RssAnon, RssShmem and the cgroup's usage are read by a sidecar process
(``measure.sidecar``) at the lowest CPU priority: no GIL is shared with the measured
code, and next to no CPU is taken from it; while every CPU is busy the sidecar waits, and each
stretch of more than ``GAP_NS`` without a sample is kept as a ``Gap`` on the timeline
and counted in its notes. Only the CUDA counters, which exist inside this process, are
read by a thread here. Read costs (measured on the 2-core CI host;
``benchmarks/sampler_overhead.py`` reports them on any host):

- host: one ``pread`` of ``/proc/PID/status`` on a descriptor kept open (3.5 us of CPU,
  7 us wall; the sidecar's wake-up costs more, about 15 us).
  ``/proc/PID/statm`` is cheaper (about 1.3 us) but lumps RssShmem with RssFile, and
  ``/proc/PID/smaps_rollup`` walks every mapping (about 2.5 ms): neither is both
  exact and cheap.
- cgroup usage: one ``pread`` of ``memory.current`` (v2) or ``memory.usage_in_bytes``
  (v1), about 1 us.
- GPU allocated/reserved: ``torch.cuda.memory_allocated``/``memory_reserved``.
- pinned allocator bytes: ``torch.cuda.host_memory_stats`` (builds a dict).
- device memory in use: ``torch.cuda.mem_get_info`` (a driver call).

The thread times each of its sources when it starts; one slower than ``COST_FRACTION``
of the interval is read every n-th tick only, and the timeline's notes say so. If the
thread's own CPU time exceeds ``BUSY_LIMIT`` of one CPU, its interval doubles, up to
``MAX_INTERVAL_NS``. Where ``/proc`` has no entry for this process, the thread reads
the host counters too (``default_sources``).
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from offloadprobe.core import pinned_stats
from offloadprobe.measure.cgroup import locate
from offloadprobe.measure.page_changes import CHANGES
from offloadprobe.measure.sidecar import DROPPED, PRIORITIES, RECORD
from offloadprobe.measure.timeline import (
    BUSY,
    GAP_NS,
    LEFT_OUT,
    SAMPLED_NOTE,
    Gap,
    PhaseSpan,
    Series,
    Timeline,
)

INTERVAL_NS = 1_000_000
MAX_INTERVAL_NS = 16_000_000
COST_FRACTION = 0.02
"""A source may spend this fraction of each interval; a slower one is read less often."""
BUSY_LIMIT = 0.10
"""If the thread's own CPU time exceeds this fraction of one CPU, the interval doubles."""
BUSY_WINDOW_NS = 250_000_000
READY_TIMEOUT_S = 5.0


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


def nested_pinned(stats: dict, version: str | None) -> tuple[int, ...] | None:
    """``(reserved, in_use)`` from ``host_memory_stats_as_nested_dict`` under torch
    ``version``, both key schemas; ``(reserved,)`` alone on a torch whose in-use counter
    misses frees (``core.pinned_stats``); None for a read that contradicts itself there."""
    figures = pinned_stats.read(pinned_stats.flatten(stats), version)
    if not pinned_stats.counts_frees(version):
        return (figures.reserved,)
    return None if figures.in_use is None else (figures.reserved, figures.in_use)


def cuda_sources(device: int = 0) -> list[CallSource]:
    """Allocator, pinned-allocator and driver counters; reads wait for CUDA's own init.

    One nested-dict call each: ``torch.cuda.memory_allocated`` and its siblings build
    and flatten the whole statistics dict on every call, several times the cost.
    """
    import torch

    cuda = torch.cuda

    def allocator() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        stats = cuda.memory_stats_as_nested_dict(device)
        if not stats:
            return None
        return (
            stats["allocated_bytes"]["all"]["current"],
            stats["reserved_bytes"]["all"]["current"],
        )

    def pinned() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        stats = cuda.host_memory_stats_as_nested_dict()
        return nested_pinned(stats, torch.__version__) if stats else None

    def used() -> Sequence[int] | None:
        if not cuda.is_initialized():
            return None
        free, total = cuda.mem_get_info(device)
        return (total - free,)

    gpu_series = (("gpu.allocated", "GPU allocated"), ("gpu.reserved", "GPU reserved"))
    pinned_series: tuple[tuple[str, str], ...] = (("pinned.reserved", "pinned reserved"),)
    if pinned_stats.counts_frees(torch.__version__):
        pinned_series += (("pinned.in_use", "pinned in use"),)
    sources = [CallSource(gpu_series, allocator)]
    if hasattr(cuda, "host_memory_stats_as_nested_dict"):
        sources.append(CallSource(pinned_series, pinned))
    sources.append(CallSource((("gpu.device_used", "device memory in use"),), used))
    return sources


def decode_records(
    data: bytes, epoch_ns: int, names: Sequence[tuple[str, str]]
) -> tuple[list[Series], int, list[Gap]]:
    """The sidecar's records as series (times since ``epoch_ns``), its read count, and
    every stretch of more than ``GAP_NS`` between two kept records (a record left out
    across a page change, ``DROPPED``, is counted in ``reads`` but holds no value). A
    stretch the sidecar read throughout, every read of it left out, is a gap ``left out``;
    one with more than ``GAP_NS`` between two reads is ``busy``: it got no CPU."""
    out = [Series(name=n, label=label) for n, label in names]
    previous, last_read, hole, reads, gaps = None, None, 0, 0, []
    for t, *values in RECORD.iter_unpack(data[: len(data) - len(data) % RECORD.size]):
        t -= epoch_ns
        reads += 1
        hole = max(hole, t - last_read) if last_read is not None else 0
        last_read = t
        if values[0] == DROPPED:
            continue
        if previous is not None and t - previous > GAP_NS:
            cause = BUSY if hole > GAP_NS else LEFT_OUT
            gaps.append(Gap(sampler="process", start_ns=previous, end_ns=t, cause=cause))
        previous, hole = t, 0
        for series, value in zip(out, values, strict=True):
            if value >= 0:
                series.append(t, value)
    return [s for s in out if s.samples], reads, gaps


class Sidecar:
    """Host and cgroup series sampled by a separate process (``measure.sidecar``)."""

    series = (
        ("host.rss", "host RSS"),
        ("host.anon", "RssAnon"),
        ("host.shmem", "RssShmem"),
        ("cgroup.current", "cgroup usage"),
    )

    def __init__(self, interval_ns: int = INTERVAL_NS, folder: str | None = None) -> None:
        self.interval_ns = interval_ns
        self.folder = folder
        """Where its two files go: the worker's own folder, which the parent removes even
        when the worker is killed before ``stop`` (else the system's temporary folder)."""
        files = locate()
        self.cgroup = str(files.current) if files is not None else ""
        self.process: subprocess.Popen | None = None
        self.path = ""
        self.cpu_s = 0.0
        """CPU seconds the sampling process used (known once stopped)."""
        self.priority = ""
        """The CPU priority it got (``sidecar.PRIORITIES``)."""
        self.reads = 0
        self.dropped = 0
        """Samples left out: taken while this process changed its emulated device pages."""
        self.gaps: list[Gap] = []
        self.changes = ""
        """The file holding this process's page-change count while sampling."""

    def start(self) -> None:
        fd, self.path = tempfile.mkstemp(
            prefix="offloadprobe-samples-", suffix=".bin", dir=self.folder
        )
        os.close(fd)
        self.changes = self.path.removesuffix(".bin") + ".changes"
        CHANGES.share(self.changes)
        script = str(Path(__file__).with_name("sidecar.py"))
        args = [
            sys.executable,
            "-I",
            "-S",
            script,
            str(os.getpid()),
            self.path,
            str(self.interval_ns),
            self.cgroup,
            self.changes,
        ]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        # Wait for the first sample, so that the samples cover what follows and the
        # interpreter's start-up is over before the caller's first phase.
        ready, _, _ = select.select([self.process.stdout], [], [], READY_TIMEOUT_S)
        if ready:
            self.priority = PRIORITIES.get(os.read(self.process.stdout.fileno(), 1), "")

    def stop(self, epoch_ns: int) -> list[Series]:
        """Stop the process and read its records, times relative to ``epoch_ns``."""
        if self.process is None:
            return []
        self.process.terminate()
        self.process.stdout.close()
        _, status, usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.process = None
        self.cpu_s = usage.ru_utime + usage.ru_stime
        CHANGES.unshare()
        Path(self.changes).unlink(missing_ok=True)
        data = Path(self.path).read_bytes()
        Path(self.path).unlink(missing_ok=True)
        series, self.reads, self.gaps = decode_records(data, epoch_ns, self.series)
        # every kept read is a sample of host RSS (stored values drop repeats, samples not)
        self.dropped = self.reads - max((s.samples for s in series), default=0)
        return series

    def note(self, seconds: float) -> str:
        """Its achieved rate, its gaps and its CPU use, in words."""
        busy = [g for g in self.gaps if g.cause == BUSY]
        missed = sum(g.end_ns - g.start_ns for g in busy) / 1e9
        longest = max((g.end_ns - g.start_ns for g in busy), default=0) / 1e6
        free = max(seconds - missed, 1e-9)
        gaps = (
            f"{len(busy)} gaps over {GAP_NS / 1e6:g} ms without a sample while every CPU "
            f"was busy ({missed:.2f} s in all, longest {longest:.0f} ms)"
            if busy
            else f"no gap over {GAP_NS / 1e6:g} ms without a read"
        )
        left = [g for g in self.gaps if g.cause == LEFT_OUT]
        if left:
            gaps += (
                f"; {len(left)} over {GAP_NS / 1e6:g} ms read throughout but left out "
                f"({sum(g.end_ns - g.start_ns for g in left) / 1e9:.2f} s in all)"
            )
        return (
            f"host and cgroup sampled by a separate process at {self.priority or 'unknown'} "
            f"CPU priority: {self.reads / max(seconds, 1e-9):.0f} reads/s on average, "
            f"{self.reads / free:.0f} outside gaps (target {1e9 / self.interval_ns:.0f}); "
            f"{gaps}; it used {self.cpu_s / max(seconds, 1e-9):.1%} of one CPU"
            + (
                f"; {self.dropped} samples left out, taken while CPU emulation moved its "
                "device pages and ballast (RSS then is between two states)"
                if self.dropped
                else ""
            )
        )


def default_sources(cuda: bool) -> list[Source]:
    """In-process sources: host and cgroup, plus the CUDA counters on a GPU."""
    sources: list[Source] = [StatusSource()]
    cgroup = cgroup_source()
    if cgroup is not None:
        sources.append(cgroup)
    if cuda:
        sources += cuda_sources()
    return sources


def sampler_for(cuda: bool, folder: str | None = None) -> Sampler:
    """Host and cgroup from a sidecar process (its files in ``folder``); only the CUDA
    counters need a thread here."""
    if Path(f"/proc/{os.getpid()}/status").exists():
        return Sampler(cuda_sources() if cuda else [], sidecar=Sidecar(folder=folder))
    return Sampler(default_sources(cuda))


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
        sidecar: Sidecar | None = None,
    ) -> None:
        self.sources = list(sources)
        self.sidecar = sidecar
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
        self._started = False
        self.busy_ns = 0
        self._last_tick: int | None = None

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
        if self._last_tick is not None and t - self._last_tick > max(GAP_NS, 2 * self.interval_ns):
            self.timeline.gaps.append(Gap(sampler="thread", start_ns=self._last_tick, end_ns=t))
        self._last_tick = t
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
        if self.sidecar is not None:
            self.sidecar.start()
        if self.sources:
            self.calibrate()
            self.tick(0)
            self._thread = threading.Thread(
                target=self._loop, name="offloadprobe-sampler", daemon=True
            )
            self._thread.start()
        self._started = True
        return self

    def stop(self) -> Timeline:
        """Stop the thread, take a last sample and return the timeline."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.tick(self.timeline.ticks, every_source=True)
        self.timeline.interval_ns = self.interval_ns
        if self.sidecar is not None:
            drawn = self.sidecar.stop(self.epoch)
            self.timeline.series[:0] = drawn
            self.timeline.gaps[:0] = self.sidecar.gaps
            last = max((s.times_ns[-1] for s in drawn if s.times_ns), default=0)
            self.timeline.end_ns = max(self.timeline.end_ns, last, self.now())
            self.timeline.notes.append(self.sidecar.note(self.timeline.end_ns / 1e9))
        self._started = False
        for source in self.sources:
            close = getattr(source, "close", None)
            if callable(close):
                close()
        return self.timeline

    @property
    def running(self) -> bool:
        return self._started
