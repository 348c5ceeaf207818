"""The timeline sampler: typed series, monotone timestamps, slow sources read less often."""

from __future__ import annotations

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


def test_sidecar_process_draws_a_64_mib_allocation_and_starts_no_thread():
    sampler = sampler_for(cuda=False)
    assert sampler.sources == []
    sampler.start()
    time.sleep(0.1)
    block = bytearray(64 << 20)  # zero-filled: every page touched
    time.sleep(0.2)
    del block
    time.sleep(0.1)
    timeline = sampler.stop()
    assert sampler._thread is None
    rss = timeline.get("host.rss")
    times = list(rss.times_ns)
    assert times == sorted(times) and rss.samples > 20
    # GIVEN 64 MiB held for 200 ms THEN the samples rise by most of it
    assert max(rss.values) - rss.values[0] > 48 << 20
    assert timeline.end_ns >= times[-1]


def test_nested_pinned_stats_read_both_torch_key_schemas():
    from offloadprobe.measure.sampler import nested_pinned

    old = {"reserved_bytes": {"current": 8}, "allocated_bytes": {"current": 3}}
    new = {"allocated_bytes": {"current": 8}, "active_bytes": {"current": 3}}
    assert nested_pinned(old) == nested_pinned(new) == (8, 3)


def test_sidecar_exits_and_removes_its_file_when_the_measured_process_dies(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import offloadprobe.measure.sidecar as sidecar

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    out = tmp_path / "samples.bin"
    side = subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(sidecar.__file__)), str(victim.pid), str(out),
         "1000000"], stdout=subprocess.PIPE,
    )  # fmt: skip
    assert side.stdout.read(1) == b"r"
    victim.wait()
    assert side.wait(timeout=10) == 0
    side.stdout.close()
    assert not out.exists()
