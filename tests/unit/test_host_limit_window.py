"""A host limit that holds what cannot be reclaimed, on fakes: the page cache dropped
before it (``measure.reclaim``, on fake cgroup folders), the window that sets and lifts it
and records what the kernel reclaimed (``repro.window``, on a fake group), and the verdict
rule that fails a host peak over it whatever the kernel did (``core.verdicts``)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from offloadprobe.core.limits import HostLimitRecord, LimitSpan
from offloadprobe.core.readings import CgroupReading
from offloadprobe.core.records import report_from_dict
from offloadprobe.core.verdicts import judge
from offloadprobe.measure.cgroup import MemoryGroup
from offloadprobe.measure.reclaim import ReclaimCount, count, drop_unmapped, reclaimed
from offloadprobe.repro.window import LimitWindow
from tests.fakes import fake_report, fake_run

MiB = 2**20
PAYLOAD = 16 * MiB


def _group(tmp_path: Path, version: int, stat: dict[str, int], usage: int) -> MemoryGroup:
    path = tmp_path / f"v{version}"
    path.mkdir()
    (path / "memory.stat").write_text("".join(f"{k} {v}\n" for k, v in stat.items()))
    if version == 1:
        (path / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (path / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    else:
        (path / "memory.current").write_text(f"{usage}\n")
        for name in ("memory.reclaim", "memory.swap.max", "memory.max"):
            (path / name).write_text("max\n")
    return MemoryGroup(version, path)


def test_v2_asks_the_kernel_for_the_cache_no_process_maps_with_no_swap(tmp_path):
    # 100 MiB of file pages: 10 of them shared memory (held), 30 mapped (the running code's)
    stat = {"file": 100 * MiB, "shmem": 10 * MiB, "file_mapped": 30 * MiB, "pgsteal": 0}
    group = _group(tmp_path, 2, stat, usage=500 * MiB)
    assert drop_unmapped(group) == 0  # a fake kernel reclaims nothing
    assert (group.path / "memory.reclaim").read_text() == str(60 * MiB)
    assert (group.path / "memory.swap.max").read_text() == "0"


def test_v1_sets_a_momentary_limit_under_the_usage_then_lifts_it(tmp_path, monkeypatch):
    stat = {"cache": 100 * MiB, "shmem": 10 * MiB, "mapped_file": 30 * MiB}
    group = _group(tmp_path, 1, stat, usage=500 * MiB)
    written: list[str] = []
    real = Path.write_text

    def record(path: Path, text: str, *args, **kwargs):
        if path.name == "memory.limit_in_bytes":
            written.append(text)
        return real(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", record)
    drop_unmapped(group)
    assert written == [str(440 * MiB), "-1"]


def test_nothing_unmapped_asks_for_nothing(tmp_path):
    group = _group(tmp_path, 2, {"file": 30 * MiB, "file_mapped": 30 * MiB}, usage=500 * MiB)
    assert drop_unmapped(group) == 0
    assert (group.path / "memory.reclaim").read_text() == "max\n"


def test_reclaim_is_the_kernels_count_on_v2_and_the_cache_fall_on_v1(tmp_path, monkeypatch):
    monkeypatch.setattr("offloadprobe.measure.reclaim.PAGE", 4096)
    v2 = _group(tmp_path, 2, {"file": 9 * MiB, "shmem": MiB, "pgsteal": 512}, usage=100 * MiB)
    assert count(v2) == ReclaimCount(cache=8 * MiB, stolen=2 * MiB, hits=None)
    v1 = _group(tmp_path, 1, {"cache": 9 * MiB, "total_cache": 12 * MiB}, usage=100 * MiB)
    assert count(v1) == ReclaimCount(cache=12 * MiB, stolen=None, hits=None)
    start, end = ReclaimCount(9 * MiB, 0, 0), ReclaimCount(9 * MiB, MiB, 3)
    assert reclaimed(start, end) == (MiB, True)
    start, end = ReclaimCount(9 * MiB, None, 0), ReclaimCount(4 * MiB, None, 0)
    assert reclaimed(start, end) == (5 * MiB, False)


class FakeGroup:
    """A memory group whose usage and page cache the test moves by hand."""

    version = 2
    mechanism = "fake memory.max"

    def __init__(self, usage: int, cache: int) -> None:
        self.usage_now, self.cache, self.stolen = usage, cache, 0
        self.limit_now: int | None = None
        self.path = Path("/nonexistent")
        self.members = [4242]

    def pids(self) -> list[int]:
        return list(self.members)

    def holds(self, pid: int) -> bool:
        return pid in self.members

    def stat(self) -> dict[str, int]:
        return {"file": self.cache, "file_mapped": 0, "pgsteal": self.stolen // 4096}

    def usage(self) -> int:
        return self.usage_now

    def set_limit(self, nbytes: int) -> list[str]:
        self.limit_now = nbytes
        return [f"memory.max = {nbytes}"]

    def lift_limit(self) -> None:
        self.limit_now = None

    def limit(self) -> int | None:
        return self.limit_now

    def failcnt(self) -> int:
        return 0


def _window(monkeypatch, group: FakeGroup, size: int) -> LimitWindow:
    def drop(g: FakeGroup) -> int:  # the kernel's part: the cache goes
        dropped, g.cache = g.cache, 0
        g.usage_now -= dropped
        return dropped

    monkeypatch.setattr("offloadprobe.repro.window.drop_unmapped", drop)
    monkeypatch.setattr("offloadprobe.measure.reclaim.PAGE", 4096)
    return LimitWindow(group, size)  # type: ignore[arg-type]


def test_the_window_drops_the_cache_then_limits_what_is_left(monkeypatch):
    # GIVEN a worker at its first gate holding 400 MiB, 48 of them page cache nothing maps
    group = FakeGroup(usage=400 * MiB, cache=48 * MiB)
    window = _window(monkeypatch, group, 24 * MiB)
    window({"event": "start", "cycle": 0, "phase": "offload"})
    # THEN the baseline is the usage after the drop, and the limit is 24 MiB over it
    assert window.baseline == 352 * MiB and group.limit_now == 376 * MiB
    # WHEN the kernel reclaims 6 MiB of page cache the worker brought in meanwhile
    group.cache, group.stolen = 2 * MiB, 6 * MiB
    window({"event": "end", "cycle": 0, "phase": "load"})
    assert group.limit_now is None  # lifted between a load and the next offload
    (span,) = window.record().spans
    assert span.dropped_bytes == 48 * MiB and span.ended and not span.limit_changed
    assert (span.reclaimed_bytes, span.reclaim_exact) == (6 * MiB, True)
    assert (
        window.record()
        .note("--host-limit")
        .startswith("--host-limit 24.00 MiB: a real limit (fake memory.max) of 376.00 MiB")
    )


def test_a_limit_changed_meanwhile_is_seen(monkeypatch):
    group = FakeGroup(usage=400 * MiB, cache=0)
    window = _window(monkeypatch, group, 24 * MiB)
    window({"event": "start", "cycle": 0, "phase": "offload"})
    group.limit_now = None  # the measured code lifted it
    window({"event": "end", "cycle": 0, "phase": "load"})
    (span,) = window.record().spans
    assert span.limit_changed and span.limit_after_bytes is None


def test_a_worker_that_leaves_its_group_is_escaped(monkeypatch):
    group = FakeGroup(usage=400 * MiB, cache=0)
    window = _window(monkeypatch, group, 24 * MiB)
    window({"event": "start", "cycle": 0, "phase": "offload", "pid": 4242})
    group.members = []  # it wrote its pid into another group's cgroup.procs
    window({"event": "end", "cycle": 0, "phase": "load", "pid": 4242})
    record = window.record()
    assert record.spans[0].left_group
    run = replace(fake_run(payload=PAYLOAD, host_peak_x=1.0), host_limit=record)
    assert judge(run)[0].kind == "escaped"
    # one that left before its first offload is outside when the limit is set
    window({"event": "start", "cycle": 1, "phase": "offload", "pid": 4242})
    assert window.spans[-1].left_group
    # a worker run in this very process (a test's) is never in a group of its own
    mine = _window(monkeypatch, FakeGroup(usage=400 * MiB, cache=0), MiB)
    mine({"event": "start", "cycle": 0, "phase": "offload", "pid": os.getpid()})
    assert not mine.spans[-1].left_group


def test_a_worker_killed_inside_the_window_is_read_after_it_ended(monkeypatch):
    group = FakeGroup(usage=400 * MiB, cache=0)
    window = _window(monkeypatch, group, MiB)
    window({"event": "start", "cycle": 0, "phase": "offload"})
    group.stolen = 3 * MiB
    window.finish()
    (span,) = window.record().spans
    assert not span.ended and span.reclaimed_bytes == 3 * MiB and group.limit_now is None


def test_v1_cache_fall_below_the_limit_is_no_reclaim(monkeypatch):
    # v1 counts no reclaim: a fall of the page cache is kept only where a phase's cgroup
    # peak reached the limit (a file deleted meanwhile falls too)
    window = _window(monkeypatch, FakeGroup(usage=0, cache=0), MiB)
    span = LimitSpan(
        cycle=0, dropped_bytes=0, usage_bytes=0, cache_bytes=0, limit_bytes=100 * MiB,
        ended=True, reclaimed_bytes=5 * MiB, reclaim_exact=False,
    )  # fmt: skip
    window.spans = [span]
    run = fake_run(cycles=1)

    def with_peak(peak: int):
        reading = CgroupReading(version=1, current_after=0, peak=peak, peak_is_phase_local=True)
        return [replace(p, cgroup=reading) for p in run.phases]

    assert window.record(phases=with_peak(90 * MiB)).spans[0].reclaimed_bytes == 0
    assert window.record(phases=with_peak(100 * MiB)).spans[0].reclaimed_bytes == 5 * MiB


def _limited(run, size: int, reclaimed_bytes: int = 0, **span):
    fields = dict(
        cycle=0, dropped_bytes=0, usage_bytes=400 * MiB, cache_bytes=0,
        limit_bytes=400 * MiB + size, ended=True, reclaimed_bytes=reclaimed_bytes,
    )  # fmt: skip
    fields.update(span)
    record = HostLimitRecord(
        size_bytes=size, mechanism="fake", baseline_bytes=400 * MiB, spans=[LimitSpan(**fields)]
    )
    return replace(run, host_limit=record)


def test_a_host_peak_over_the_limit_fails_though_no_kill_came():
    # naive's shape: 2x the payload at cycle 0's offload, under a limit of 1.5x
    run = _limited(fake_run("naive", payload=PAYLOAD, host_peak_x=2.0), 24 * MiB, 9 * MiB)
    verdict, _ = judge(run)
    assert verdict.kind == "over limit" and verdict.exit_code == 1
    assert (verdict.cycle, verdict.phase) == (0, "offload")
    assert verdict.line() == (
        "over limit: host peak 32.00 MiB over the usage at the first offload > the limit's "
        "24.00 MiB; not killed: the kernel reclaimed at least 9.00 MiB of page cache instead "
        "(cycle 0, phase offload)"
    )


def test_within_the_limit_stays_ok_and_a_changed_limit_is_inconsistent():
    lazy = fake_run("lazy", payload=PAYLOAD, host_peak_x=1.0)
    assert judge(_limited(lazy, 24 * MiB))[0].ok
    tight, _ = judge(_limited(lazy, 16 * MiB - 1))  # no reclaim seen: still over
    assert tight.kind == "over limit" and tight.detail.endswith("; not killed")
    changed = _limited(lazy, 24 * MiB, limit_after_bytes=None, limit_changed=True)
    verdict, _ = judge(changed)
    assert verdict.kind == "inconsistent" and "no limit at the load's end" in verdict.detail


def test_the_record_survives_its_json():
    run = _limited(fake_run("naive", payload=PAYLOAD, host_peak_x=2.0), 24 * MiB, 9 * MiB)
    doc = fake_report(run).to_dict()
    assert doc["runs"][0]["host_limit"]["spans"][0]["reclaimed_bytes"] == 9 * MiB
    back = report_from_dict(doc).runs[0]
    assert back.host_limit == run.host_limit
    assert judge(back)[0] == judge(run)[0]  # a saved record is judged as it was
