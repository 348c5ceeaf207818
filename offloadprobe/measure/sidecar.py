"""A sampling process beside the measured one: host memory counters with no GIL shared.

A sampling thread inside the measured process takes the GIL for every sample, three
times per sample (each read that enters the kernel gives it back), and the measured
code's Python waits each time. On a loaded 2-core host that cost a train step about
20% (``benchmarks/sampler_overhead.py``). The kernel's counters need no GIL: this
process reads ``/proc/PID/status`` (VmRSS, RssAnon, RssShmem) and the cgroup's usage
file of the measured process about every millisecond and appends fixed-size binary
records to a file, until SIGTERM or until the measured process is gone.

It runs at the lowest CPU priority (``SCHED_IDLE``; ``nice 19`` where that is refused),
so it takes next to no CPU that the measured process or anyone else wants (it never
preempts on waking; its weight is 3 against 1024): where a CPU is
free it samples at the requested rate, and while every CPU is busy it waits, leaving a
gap in its records (the parent reports every gap; see ``measure.sampler``). Per sample
it costs one wake-up (about 15 us of CPU on the 2-core CI host, most of the cost), one
``preadv`` into a reused buffer on a descriptor kept open (about 3.5 us: the kernel
renders the whole file) and the parse of the three adjacent lines (under 2 us).

A sample taken while the measured process changed pages that are not its host memory
(CPU emulation's device pages and ballast, ``measure.page_changes``) is left out: the
count in CHANGES is read before and after each read, and a record of ``DROPPED`` stands
in its place when it was odd or moved.

Standard library only, run as
``python -I -S sidecar.py PID OUT INTERVAL_NS [CGROUP [CHANGES]]`` (CGROUP may be empty)
(no site-packages to import: it starts in a few milliseconds). Its timestamps are
``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux: the same clock as the parent's.
The first byte it writes to stdout, once the first sample is taken, names the priority
it got (``PRIORITIES``).
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time

RECORD = struct.Struct("<qqqqq")
"""time (ns), VmRSS, RssAnon, RssShmem, cgroup usage (bytes; -1 where unreadable)."""
KEYS = (b"VmRSS:", b"RssAnon:", b"RssShmem:")
BATCH = 512
"""Records packed into one reused buffer before one write."""
PRIORITIES = {b"i": "SCHED_IDLE", b"n": "nice 19", b"r": "normal priority"}
DROPPED = -2
"""VmRSS of a record that stands for a sample left out (taken across a page change)."""


def lowest_priority() -> bytes:
    """Ask for ``SCHED_IDLE``, else ``nice 19``; the key of ``PRIORITIES`` obtained."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return b"i"
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19 - os.nice(0))
        return b"n"
    except OSError:
        return b"r"


def parse_status(text: bytes | bytearray, end: int | None = None) -> list[int]:
    """VmRSS, RssAnon, RssShmem in bytes (-1 for a key the kernel does not report)."""
    end = len(text) if end is None else end
    start = text.find(b"VmRSS:", 0, end)
    if start >= 0:
        # Since Linux 4.5 the lines are adjacent: VmRSS, RssAnon, RssFile, RssShmem.
        fields = text[start : min(end, start + 160)].split()
        if len(fields) > 10 and fields[3] == b"RssAnon:" and fields[9] == b"RssShmem:":
            return [int(fields[1]) << 10, int(fields[4]) << 10, int(fields[10]) << 10]
    out = []
    for key in KEYS:
        start = text.find(key, 0, end)
        if start < 0:
            out.append(-1)
            continue
        start += len(key)
        out.append(int(text[start : text.index(b"kB", start)]) << 10)
    return out


def _changes(path: str):
    """The measured process's page-change count, mapped read-only (None without one)."""
    if not path:
        return None
    import mmap

    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 8, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def sample(pid: int, out: str, interval_ns: int, cgroup: str = "", changes: str = "") -> None:
    status = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    group = os.open(cgroup, os.O_RDONLY) if cgroup else -1
    count = _changes(changes)
    priority = lowest_priority()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    text, number = bytearray(8192), bytearray(64)
    records, offset = bytearray(RECORD.size * BATCH), 0
    clock, pack_into, preadv = time.perf_counter_ns, RECORD.pack_into, os.preadv
    with open(out, "wb", buffering=0) as fh:
        deadline = clock()
        while not stopping:
            before = count[:8] if count is not None else b""
            now = clock()
            try:
                size = preadv(status, [text], 0)
                usage = int(number[: preadv(group, [number], 0)]) if group >= 0 else -1
            except (OSError, ValueError):
                break
            values = parse_status(text, size)
            if values[0] < 0:
                break  # a zombie has no VmRSS
            if count is not None and (before[0] & 1 or count[:8] != before):
                values, usage = [DROPPED, DROPPED, DROPPED], DROPPED  # across a page change
            pack_into(records, offset, now, values[0], values[1], values[2], usage)
            offset += RECORD.size
            if offset == len(records):
                fh.write(records)
                offset = 0
            if priority:
                os.write(1, priority)  # tells the parent the first sample is taken
                priority = b""
            deadline += interval_ns
            # Behind (the CPUs were busy): start afresh rather than catch up in a burst.
            wait = deadline - clock()
            if wait <= 0:
                deadline, wait = clock(), 0
            time.sleep(wait / 1e9)
        fh.write(records[:offset])
    if not stopping:  # the measured process died without stopping us: nobody will read it
        os.unlink(out)


if __name__ == "__main__":
    sample(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), *sys.argv[4:6])
