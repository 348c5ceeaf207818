"""The host sampler leaves out what it read while CPU emulation moved its device pages:
RSS then is between two states (a compare plot showed a freed grad buffer as -2.8x)."""

from __future__ import annotations

import time

from offloadprobe.measure.page_changes import CHANGES
from offloadprobe.measure.sampler import Sidecar, decode_records
from offloadprobe.measure.sidecar import DROPPED, RECORD

MiB = 2**20


def test_nothing_read_during_a_change_reaches_the_timeline():
    """GIVEN a change that holds 64 MiB more for 100 ms and gives it back before it ends
    WHEN the sidecar samples throughout THEN no sample shows the 64 MiB, and the window is
    either left out sample by sample or was not sampled at all (a gap)."""
    sidecar = Sidecar()
    epoch = time.perf_counter_ns()
    sidecar.start()
    try:
        time.sleep(0.03)
        base = _rss()
        CHANGES.begin()
        start = time.perf_counter_ns() - epoch
        held = b"\1" * (64 * MiB)  # written: resident
        time.sleep(0.1)
        del held
        end = time.perf_counter_ns() - epoch
        CHANGES.end()
        time.sleep(0.03)
    finally:
        series = {s.name: s for s in sidecar.stop(epoch)}
    rss = series["host.rss"]
    assert max(rss.values) < base + 32 * MiB
    covered = any(g.start_ns <= start and g.end_ns >= end for g in sidecar.gaps)
    assert sidecar.dropped > 0 or covered
    assert CHANGES.value % 2 == 0


def test_a_left_out_record_counts_as_read_and_leaves_a_gap():
    ms = 1_000_000
    kept = [RECORD.pack(t * ms, 100, 50, 0, -1) for t in (0, 1)]
    left_out = [RECORD.pack(t * ms, DROPPED, DROPPED, DROPPED, DROPPED) for t in range(2, 30)]
    data = b"".join([*kept, *left_out, RECORD.pack(30 * ms, 100, 50, 0, -1)])
    series, reads, gaps = decode_records(data, 0, Sidecar.series)
    assert reads == 31 and series[0].samples == 3 and len(series[0].times_ns) == 1
    assert [(g.start_ns, g.end_ns, g.cause) for g in gaps] == [(1 * ms, 30 * ms, "left out")]


def test_a_stretch_read_throughout_is_left_out_and_one_without_reads_is_busy():
    """GIVEN 28 reads left out across a page change, then 30 ms without any read WHEN the
    records are decoded THEN the first stretch is a gap 'left out' (the sidecar was
    reading), the second 'busy' (it got no CPU), and the note says each for what it is
    and counts the 28 left-out samples, not the repeated values the series did not store."""
    ms = 1_000_000
    kept = [RECORD.pack(t * ms, 100, 50, 0, -1) for t in (0, 1)]
    left_out = [RECORD.pack(t * ms, DROPPED, DROPPED, DROPPED, DROPPED) for t in range(2, 30)]
    after = [RECORD.pack(t * ms, 100, 50, 0, -1) for t in (30, 60)]
    data = b"".join([*kept, *left_out, *after])
    series, reads, gaps = decode_records(data, 0, Sidecar.series)
    assert [(g.start_ns // ms, g.end_ns // ms, g.cause) for g in gaps] == [
        (1, 30, "left out"),
        (30, 60, "busy"),
    ]
    sidecar = Sidecar()
    sidecar.reads, sidecar.gaps, sidecar.priority = reads, gaps, "SCHED_IDLE"
    sidecar.dropped = reads - max(s.samples for s in series)
    note = sidecar.note(0.06)
    assert sidecar.dropped == 28 and "28 samples left out" in note
    assert "1 gaps over 10 ms without a sample while every CPU was busy (0.03 s" in note
    assert "1 over 10 ms read throughout but left out (0.03 s in all)" in note


def _rss() -> int:
    from offloadprobe.engine.runtime.device_memory import rss

    return rss()
