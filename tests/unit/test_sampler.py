"""The timeline sampler: typed series, monotone timestamps, slow sources read less often."""

from __future__ import annotations

import bisect
import time

from offloadprobe.measure.probes.host import read_status
from offloadprobe.measure.sampler import Sampler, StatusSource, sampler_for
from offloadprobe.measure.timeline import Series, Timeline


class Counter:
    """A fake source: 0, 1, 2, ... on each read."""

    series = (("fake.count", "count"),)

    def __init__(self, delay_s: float = 0.0) -> None:
        self.n, self.delay_s = 0, delay_s

    def read(self):
        if self.delay_s:
            time.sleep(self.delay_s)
        self.n += 1
        return (self.n,)


def test_series_keeps_only_changes_but_counts_every_read():
    s = Series(name="x", label="x")
    for t, v in [(1, 5), (2, 5), (3, 7), (4, 7), (5, 5)]:
        s.append(t, v)
    assert list(s.times_ns) == [1, 3, 5]
    assert list(s.values) == [5, 7, 5]
    assert s.samples == 5


def test_samples_are_monotone_in_time_and_the_run_is_covered():
    sampler = Sampler([Counter()]).start()
    time.sleep(0.15)
    start = sampler.now()
    time.sleep(0.02)
    sampler.span(0, "offload", start, sampler.now())
    timeline = sampler.stop()
    series = timeline.get("fake.count")
    times = list(series.times_ns)
    assert times == sorted(times) and len(set(times)) == len(times)
    # GIVEN a 1 ms interval on a loaded 2-core host THEN well over 20 reads in 170 ms
    assert series.samples > 20
    assert timeline.end_ns >= times[-1]
    assert timeline.spans[0].phase == "offload"
    assert timeline.spans[0].start_ns < timeline.spans[0].end_ns <= timeline.end_ns


def test_a_slow_source_is_read_less_often_and_a_note_says_so():
    fast, slow = Counter(), Counter(delay_s=0.0008)
    sampler = Sampler([fast, slow])
    sampler.calibrate()
    assert sampler.every[0] == 1
    assert sampler.every[1] > 1
    assert any("sampled every" in note for note in sampler.timeline.notes)


def test_status_source_matches_proc_status():
    source = StatusSource()
    rss, anon, shmem = source.read()
    status = read_status()
    source.close()
    assert anon <= rss and shmem <= rss
    assert abs(rss - status["VmRSS"]) < 64 << 20


def test_timeline_round_trips_through_json_form():
    sampler = Sampler([Counter()]).start()
    time.sleep(0.01)
    sampler.span(1, "load", 5, 9)
    timeline = sampler.stop()
    again = Timeline.from_dict(timeline.to_dict())
    assert again.to_dict() == timeline.to_dict()


def test_sidecar_process_draws_a_64_mib_allocation_or_declares_a_gap_over_it():
    sampler = sampler_for(cuda=False)
    assert sampler.sources == []
    sampler.start()
    time.sleep(0.1)
    allocating = sampler.now()
    block = bytearray(64 << 20)  # zero-filled: every page touched
    held_from = sampler.now()
    time.sleep(0.2)
    held_to = sampler.now()
    del block
    time.sleep(0.1)
    timeline = sampler.stop()
    assert sampler._thread is None
    rss = timeline.get("host.rss")
    times = list(rss.times_ns)
    assert times == sorted(times) and rss.samples >= 1
    assert timeline.end_ns >= times[-1]
    # The sidecar waits while every CPU is busy (lowest priority): it either drew the
    # 64 MiB held for 200 ms, or it declares the stretch it did not see.
    if not any(g.start_ns < held_to and g.end_ns > held_from for g in timeline.gaps):
        before = rss.values[max(0, bisect.bisect_right(times, allocating) - 1)]
        during = rss.values[bisect.bisect_right(times, held_to) - 1]
        assert during - before > 48 << 20
        assert rss.samples > 20
    else:
        assert any("gaps over 10 ms" in n for n in timeline.notes)


def test_sidecar_exits_and_removes_its_file_when_the_measured_process_dies(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import offloadprobe.measure.sidecar as sidecar

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    out = tmp_path / "samples.bin"
    side = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            str(Path(sidecar.__file__)),
            str(victim.pid),
            str(out),
            "1000000",
        ],
        stdout=subprocess.PIPE,
    )
    assert side.stdout.read(1) in sidecar.PRIORITIES
    victim.wait()
    assert side.wait(timeout=10) == 0
    side.stdout.close()
    assert not out.exists()


def test_sidecar_records_decode_with_every_gap_over_10_ms():
    from offloadprobe.measure.sampler import Sidecar, decode_records
    from offloadprobe.measure.sidecar import RECORD

    ms = 1_000_000
    times = [0, 1, 2, 3, 40, 41, 42, 60]  # holes of 37 ms and 18 ms
    data = b"".join(RECORD.pack(5 * ms + t * ms, 100 + t, 50, 0, -1) for t in times)
    series, reads, gaps = decode_records(data + b"\0" * 7, 5 * ms, Sidecar.series)
    assert reads == len(times)
    assert [(g.start_ns, g.end_ns) for g in gaps] == [(3 * ms, 40 * ms), (42 * ms, 60 * ms)]
    assert {s.name for s in series} == {"host.rss", "host.anon", "host.shmem"}  # no cgroup
    assert list(series[0].times_ns) == [t * ms for t in times]


def test_status_parse_reads_adjacent_lines_and_falls_back_when_reordered():
    from offloadprobe.measure.sidecar import parse_status

    usual = b"VmHWM:\t 9 kB\nVmRSS:\t  12 kB\nRssAnon:\t 8 kB\nRssFile:\t 3 kB\nRssShmem:\t 1 kB\n"
    odd = b"RssShmem:\t 1 kB\nVmRSS:\t  12 kB\nRssAnon:\t 8 kB\nVmData:\t 3 kB\n"
    assert parse_status(usual) == parse_status(odd) == [12 << 10, 8 << 10, 1 << 10]
    assert parse_status(b"Name:\tzombie\n") == [-1, -1, -1]


def test_sidecar_runs_at_the_lowest_cpu_priority_and_its_note_says_so():
    import os

    sampler = sampler_for(cuda=False).start()
    try:
        pid = sampler.sidecar.process.pid
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        time.sleep(0.05)
    finally:
        timeline = sampler.stop()
    note = next(n for n in timeline.notes if "separate process" in n)
    assert "SCHED_IDLE" in note and "reads/s" in note
    assert all(g.sampler == "process" and g.end_ns > g.start_ns for g in timeline.gaps)
