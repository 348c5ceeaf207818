"""A sampling process beside the measured one: host memory counters with no GIL shared.

A sampling thread inside the measured process takes the GIL for every sample, three
times per sample (each read that enters the kernel gives it back), and the measured
code's Python waits each time. On a loaded 2-core host that cost a train step about
20% (``benchmarks/sampler_overhead.py``). The kernel's counters need no GIL: this
process reads ``/proc/PID/status`` (VmRSS, RssAnon, RssShmem) and the cgroup's usage
file of the measured process about every millisecond and appends fixed-size binary
records to a file, until SIGTERM or until the measured process is gone. It holds its
own CPU use to ``CPU_BUDGET`` of one CPU by lengthening its interval.

Standard library only, run as ``python -I -S sidecar.py PID OUT INTERVAL_NS [CGROUP]``
(no site-packages to import: it starts in a few milliseconds). Its timestamps are
``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux: the same clock as the parent's.
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
CPU_BUDGET = 0.02
"""Most of one CPU this process may use: above it the interval doubles, well below it
halves again (never below the requested one). Waking up costs more than reading: a
``time.sleep`` of 0.5 ms took 27 us of CPU on the loaded 2-core CI host, the read and
parse of ``/proc/PID/status`` 11 us; there the rate settles near 300 Hz, on an idle
many-core host at the full 1 kHz."""
MAX_INTERVAL_NS = 16_000_000
WINDOW_NS = 200_000_000


def parse_status(text: bytes) -> list[int]:
    """VmRSS, RssAnon, RssShmem in bytes (-1 for a key the kernel does not report)."""
    out = []
    for key in KEYS:
        start = text.find(key)
        if start < 0:
            out.append(-1)
            continue
        start += len(key)
        out.append(int(text[start : text.index(b"kB", start)]) * 1024)
    return out


def sample(pid: int, out: str, interval_ns: int, cgroup: str = "") -> None:
    status = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    group = os.open(cgroup, os.O_RDONLY) if cgroup else -1
    stopping, ready = [], []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    base, window = interval_ns, (time.perf_counter_ns(), time.process_time_ns())
    with open(out, "wb", buffering=1 << 16) as fh:
        deadline = time.perf_counter_ns()
        while not stopping:
            now = time.perf_counter_ns()
            if now - window[0] >= WINDOW_NS:
                share = (time.process_time_ns() - window[1]) / (now - window[0])
                if share > CPU_BUDGET and interval_ns < MAX_INTERVAL_NS:
                    interval_ns *= 2
                elif share < CPU_BUDGET / 3 and interval_ns > base:
                    interval_ns //= 2
                window = (now, time.process_time_ns())
            try:
                text = os.pread(status, 8192, 0)
                usage = int(os.pread(group, 64, 0)) if group >= 0 else -1
            except (OSError, ValueError):
                break
            values = parse_status(text)
            if values[0] < 0:
                break  # a zombie has no VmRSS
            fh.write(RECORD.pack(now, *values, usage))
            if not ready:
                ready.append(True)
                os.write(1, b"r")  # tells the parent the first sample is taken
            deadline = max(deadline + interval_ns, time.perf_counter_ns())
            time.sleep(max(0, deadline - time.perf_counter_ns()) / 1e9)
    if not stopping:  # the measured process died without stopping us: nobody will read it
        os.unlink(out)


if __name__ == "__main__":
    sample(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
