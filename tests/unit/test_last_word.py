"""The parent's last word, on fakes: cgroup membership read from ``/proc/PID/cgroup`` (v1,
v2, hybrid), the group's peak reset and read by the parent (v1 high-water mark and
thresholds, v2 its own ``memory.peak`` file), the channel's lines and acknowledgements,
and the rules that hold a record against what was streamed (``core.streamed``)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from offloadprobe.core.outcomes import Failure
from offloadprobe.core.readings import CgroupReading
from offloadprobe.core.streamed import PhasePeak, Streamed, ending, merge
from offloadprobe.core.verdicts import judge
from offloadprobe.engine.channel import Findings, ParentChannel
from offloadprobe.isolation.supervisor import _result
from offloadprobe.isolation.warden import Warden, held_against
from offloadprobe.measure.cgroup import MemoryGroup, member_path
from offloadprobe.measure.parent_peaks import FRACTIONS, ParentPeaks, Thresholds
from tests.fakes import fake_run

MiB = 2**20
V1 = "9:name=systemd:/\n4:memory:/pod/worker\n1:cpu:/\n0::/\n"
V2 = "0::/pod/worker\n"


def _proc(tmp_path: Path, pid: int, cgroup: str, *, flags: int = 0, state: str = "S") -> Path:
    folder = tmp_path / "proc" / str(pid)
    folder.mkdir(parents=True)
    (folder / "cgroup").write_text(cgroup)
    (folder / "stat").write_text(f"{pid} (python a) b) {state} 1 2 3 0 -1 {flags} 0 0\n")
    return tmp_path / "proc"


def test_the_memory_line_names_the_group_on_v1_and_the_0_line_on_v2():
    assert member_path(V1, 1) == "/pod/worker"
    assert member_path(V1, 2) == "/"
    assert member_path(V2, 2) == "/pod/worker"
    assert member_path(V2, 1) is None


@pytest.mark.parametrize(
    ("version", "mount", "text", "inside"),
    [
        (1, "memory", V1, True),
        (1, "memory", V1.replace("/pod/worker", "/pod"), False),  # moved to the parent
        (1, "memory", V1.replace("/pod/worker", "/pod/worker/own"), True),  # a child group
        (1, "memory", V1.replace("/pod/worker", "/pod/worker2"), False),  # not a child
        (2, "", V2, True),
        (2, "", "0::/pod\n", False),
        (2, "unified", V2, True),  # hybrid: the v2 hierarchy under unified/
    ],
)
def test_membership_is_read_from_the_kernels_file(tmp_path, version, mount, text, inside):
    root = tmp_path / "cgroup"
    group = MemoryGroup(version, root / mount / "pod" / "worker" if mount else root / "pod/worker")
    proc = _proc(tmp_path, 4242, text)
    assert group.holds(4242, proc=proc, root=root) is inside


def test_a_process_on_its_way_out_or_gone_is_no_escape(tmp_path):
    """v1 names the root group for an exiting process (PF_EXITING) and for a zombie."""
    root = tmp_path / "cgroup"
    group = MemoryGroup(1, root / "memory" / "pod" / "worker")
    outside = V1.replace("/pod/worker", "/")
    proc = _proc(tmp_path, 1, outside, flags=0x4)
    _proc(tmp_path, 2, outside, state="Z")
    assert group.holds(1, proc=proc, root=root) is None
    assert group.holds(2, proc=proc, root=root) is None
    assert group.holds(3, proc=proc, root=root) is None  # no such process


def _fake_group(tmp_path: Path, version: int) -> MemoryGroup:
    path = tmp_path / f"v{version}"
    path.mkdir()
    (path / "memory.stat").write_text("cache 3145728\nfile 3145728\nshmem 1048576\n")
    if version == 1:
        (path / "memory.usage_in_bytes").write_text(f"{100 * MiB}\n")
        (path / "memory.max_usage_in_bytes").write_text(f"{900 * MiB}\n")
        (path / "cgroup.event_control").write_text("")
    else:
        (path / "memory.current").write_text(f"{100 * MiB}\n")
        (path / "memory.peak").write_text(f"{900 * MiB}\n")
    return MemoryGroup(version, path)


def test_v1_the_parent_resets_the_mark_and_lays_thresholds_in_payloads(tmp_path):
    group = _fake_group(tmp_path, 1)
    peaks = ParentPeaks(group, scale=4 * MiB)
    peaks.begin()
    assert (group.path / "memory.max_usage_in_bytes").read_text() == "0"  # the parent's reset
    ladder = peaks._thresholds
    assert ladder is not None
    assert [level for level, _ in ladder.levels] == [
        100 * MiB + int(f * 4 * MiB) for f in FRACTIONS
    ]
    # the kernel signals the 2.0x level (and the ones below): the worker's reset of the
    # mark (what the fake file says at the end) cannot lower the floor
    for level, efd in ladder.levels:
        if level <= 108 * MiB:
            os.eventfd_write(efd, 1)
    (group.path / "memory.max_usage_in_bytes").write_text(f"{101 * MiB}\n")
    read = peaks.end()
    assert (read.watermark_bytes, read.floor_bytes, read.peak_bytes) == (
        101 * MiB,
        108 * MiB,
        108 * MiB,
    )
    assert read.file_after_bytes == 2 * MiB  # page cache less shared memory
    # the next phase drains what was signalled before it, and keeps the ladder
    os.eventfd_write(ladder.levels[-1][1], 1)
    peaks.begin()
    assert peaks._thresholds is ladder
    assert peaks.end().floor_bytes is None
    peaks.close()


def test_v1_more_thresholds_are_laid_once_the_usage_left_them_below(tmp_path):
    group = _fake_group(tmp_path, 1)
    peaks = ParentPeaks(group, scale=4 * MiB)
    peaks.begin()
    ladder = peaks._thresholds
    assert ladder is not None
    (group.path / "memory.usage_in_bytes").write_text(f"{140 * MiB}\n")  # 10x higher
    peaks.end()
    peaks.begin()  # over the new usage; those below stay (the usage may come back)
    levels = [level for level, _ in ladder.levels]
    assert len(levels) == 2 * len(FRACTIONS) and levels[len(FRACTIONS)] == 141 * MiB
    peaks.end()
    peaks.begin()  # enough above it now: none more
    assert len(ladder.levels) == 2 * len(FRACTIONS)
    peaks.close()


def test_v2_the_parent_resets_and_reads_through_its_own_file(tmp_path):
    group = _fake_group(tmp_path, 2)
    peaks = ParentPeaks(group, scale=4 * MiB)
    peaks.begin()
    assert (group.path / "memory.peak").read_text().startswith("reset")  # through its fd
    assert peaks._thresholds is None  # v2 has no thresholds: its peak is its own
    (group.path / "memory.peak").write_text(f"{108 * MiB}\n")  # the kernel's, for that fd
    read = peaks.end()
    assert (read.peak_bytes, read.floor_bytes) == (108 * MiB, None)
    peaks.close()


def test_v2_before_per_file_resets_gives_no_phase_peak(tmp_path):
    group = _fake_group(tmp_path, 2)
    (group.path / "memory.peak").unlink()
    (group.path / "memory.peak").mkdir()  # cannot be opened for writing: no reset
    peaks = ParentPeaks(group)
    peaks.begin()
    assert peaks.end().peak_bytes is None
    peaks.close()


def test_thresholds_over_a_fake_without_event_control_give_no_floor(tmp_path):
    group = _fake_group(tmp_path, 1)
    (group.path / "cgroup.event_control").unlink()
    ladder = Thresholds(group)
    ladder.add([MiB])
    assert ladder.broken and ladder.levels == [] and ladder.crossed() is None


def test_the_channel_tells_the_parent_line_by_line_and_each_is_acknowledged():
    warden = Warden()
    channel = ParentChannel.connect(warden.path)
    assert channel.connected and not channel.owns_peaks
    found = Findings(channel)
    channel.mark("start", 0, "offload")
    channel.mark("end", 0, "offload")
    found += ["cycle 0: param_data differs"]
    found.append("cycle 0: grad_data differs")
    channel.result({"exit_code": 1})
    channel.send({"mark": "end", "cycle": [0]})  # unreadable: counted, still acknowledged
    channel.done()
    channel.send({"problems": ["after its last word"]})  # closed: goes nowhere
    facts = warden.stop()
    assert warden.pid == os.getpid()  # the kernel's word for who connected
    assert facts.connected and facts.result == {"exit_code": 1}
    assert facts.problems == ["cycle 0: param_data differs", "cycle 0: grad_data differs"]
    assert [(m.cycle, m.phase, m.peak_bytes) for m in facts.marks] == [(0, "offload", None)]
    assert list(found) == facts.problems
    assert facts.garbled == 1


class _Leaves:
    """A group the worker is in until ``gone`` is set (its ``/proc`` file says so)."""

    version = 1

    def __init__(self) -> None:
        self.gone = False

    def holds(self, pid: int) -> bool:
        return not self.gone

    def pids(self) -> list[int]:
        return [] if self.gone else [os.getpid()]


def test_a_worker_found_outside_its_group_is_escaped_where_it_was(monkeypatch):
    monkeypatch.setattr("offloadprobe.isolation.warden.ParentPeaks", lambda *a, **k: None)
    group = _Leaves()
    warden = Warden(group)
    channel = ParentChannel.connect(warden.path)
    channel.mark("start", 1, "offload")  # acknowledged: the parent holds it
    group.gone = True  # it wrote its pid into another group's cgroup.procs
    channel.done()
    warden.stop()
    assert warden.escaped is not None and warden.escaped.pid == os.getpid()
    message = warden.escape_message() or ""
    assert "left its memory cgroup during cycle 1, phase offload" in message
    assert "(killed)" not in message  # the worker of a test runs in this process


def test_a_worker_never_in_the_group_cannot_leave_it(monkeypatch):
    """A test's worker in this process beside a group it never joined (``run --host-limit``
    with an in-process stand-in): no escape, and the group's peaks are not its own."""

    class Never(_Leaves):
        def holds(self, pid: int) -> bool:
            return False

        def pids(self) -> list[int]:
            return []

    class NoPeaks:
        def __init__(self, *args, **kwargs) -> None: ...

        def close(self) -> None: ...

    monkeypatch.setattr("offloadprobe.isolation.warden.ParentPeaks", NoPeaks)
    warden = Warden(Never())
    channel = ParentChannel.connect(warden.path)
    channel.done()
    facts = warden.stop()
    assert warden.escaped is None and not facts.peaks_by_parent


def _facts(**kw) -> Streamed:
    return Streamed(connected=True, result={"exit_code": 0}, **kw)


def _marked(run) -> list[PhasePeak]:
    return [PhasePeak(cycle=p.cycle, phase=p.phase, peak_bytes=None) for p in run.phases]


def test_a_streamed_problem_the_record_dropped_is_corrupted_over_an_inconsistent_end():
    run = fake_run(cycles=1)  # the record, rewritten: clean
    facts = _facts(problems=["cycle 0: param_data differs"], marks=_marked(run), rewritten=True)
    said = Failure(kind="inconsistent", message="it exited 0, the record said 1")
    failure = ending(run, facts, said)
    assert failure is not None and failure.kind == "corrupted"
    assert failure.message.startswith("cycle 0: param_data differs")
    assert "rewritten" in failure.message and "exited 0" in failure.message
    merged = merge(run, facts)
    assert merged.integrity == ["cycle 0: param_data differs"]
    assert merged.summary is not None and not merged.summary.integrity_ok
    assert judge(merged)[0].kind == "corrupted"


def test_an_honest_record_keeps_its_own_verdict():
    run = fake_run(cycles=2, integrity=["cycle 1: param_data differs"])
    facts = _facts(problems=["cycle 1: param_data differs"], marks=_marked(run))
    assert ending(run, facts, None) is None
    clean = fake_run(cycles=2)
    assert ending(clean, _facts(marks=_marked(clean)), None) is None
    assert merge(clean, _facts(marks=_marked(clean))) is clean
    # a stand-in worker that never connected: nothing to hold against
    assert ending(clean, Streamed(), None) is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(rewritten=True), "record file is not the record the worker sent"),
        (dict(unsent=True, result=None), "never sent its record"),
        (dict(marks=[]), "never marked to its parent (first: cycle 0, phase train)"),
        (dict(garbled=2), "sent its parent 2 line(s) it could not read"),
    ],
)
def test_a_record_that_contradicts_the_stream_is_inconsistent(change, words):
    run = fake_run(cycles=1)
    facts = replace(_facts(marks=_marked(run)), **change)
    failure = ending(run, facts, None)
    assert failure is not None and failure.kind == "inconsistent"
    assert words in failure.message


def test_the_parents_peak_governs_where_larger_and_the_summary_follows():
    run = fake_run(cycles=1, host_peak_x=1.0)
    group = CgroupReading(
        version=1,
        current_after=0,
        peak=None,
        peak_is_phase_local=False,
        current_before=0,
        file_after=0,
    )
    base = run.baseline_host_bytes
    phases = [
        replace(
            p,
            cgroup=group,
            host=replace(
                p.host, group_before=p.host.host_rss_before, group_after=p.host.host_rss_after
            ),
        )
        for p in run.phases
    ]
    run = replace(run, phases=phases)
    payload = run.payload_bytes
    marks = [
        PhasePeak(cycle=0, phase="train", peak_bytes=None),
        PhasePeak(cycle=0, phase="offload", peak_bytes=base + 3 * payload, floor_bytes=base),
        PhasePeak(cycle=0, phase="load", peak_bytes=base),  # lower than the record's: kept
    ]
    held = held_against(run, _facts(marks=marks, peaks_by_parent=True))
    offload = held.phases[1]
    assert offload.cgroup is not None and offload.cgroup.peak_read_by == "parent"
    assert offload.host.host_peak == base + 3 * payload
    assert held.phases[2].host.host_peak == run.phases[2].host.host_peak
    assert held.summary is not None and held.summary.host_peak_x == pytest.approx(3.0)
    assert held.summary.steady_host_x == run.summary.steady_host_x  # only peaks change
    # without the parent's readings (a test's stand-in worker, no group) nothing changes
    assert held_against(run, _facts(marks=marks)) == run


def test_the_sent_result_is_the_record_and_the_file_is_checked_against_it(tmp_path):
    from offloadprobe.core.config import ModelConfig, RunConfig
    from offloadprobe.core.job import Job

    job = Job(config=RunConfig(model=ModelConfig()), workdir=str(tmp_path))
    sent = {"exit_code": 1, "report": None, "failure": None, "pid": 7, "version": 1}
    path = job.result_path(None)
    path.write_text(json.dumps({**sent, "exit_code": 0}))
    result, facts = _result(job, Streamed(connected=True, result=sent))
    assert result is not None and result.exit_code == 1 and facts is not None and facts.rewritten
    path.write_text(json.dumps(sent))
    result, facts = _result(job, Streamed(connected=True, result=sent))
    assert facts is not None and not facts.rewritten
    result, facts = _result(job, Streamed(connected=True))
    assert result is not None and facts is not None and facts.unsent
    # a real worker that never reported, beside a record: written otherwise
    result, facts = _result(job, Streamed(expected=True))
    assert facts is not None and facts.unsent
    assert ending(None, facts, None) is not None
    # a test's stand-in that never reported: its record alone
    result, facts = _result(job, Streamed())
    assert result is not None and facts is not None and not facts.unsent


def test_the_escape_watch_names_the_worker_itself_when_it_left():
    """The loop's slower look (every 250 ms, also before the worker connects and after its
    last word) sees the worker itself, not only its descendants."""
    from offloadprobe.isolation.escapes import EscapeWatch

    class Left:
        def holds(self, pid: int) -> bool | None:
            return pid != os.getpid()

        def pids(self) -> list[int]:
            return []

    watch = EscapeWatch(os.getpid(), Left())
    watch.look()
    assert os.getpid() in watch.found
    assert (watch.message() or "").startswith(f"the measured process (pid {os.getpid()}")


def test_an_escape_needs_both_readings_of_the_kernel_to_agree():
    """``/proc/PID/cgroup`` says outside, but the group still lists the process (a cgroup
    namespace naming paths the mount does not have): no escape."""
    from offloadprobe.isolation.escapes import left

    class Group:
        def __init__(self, listed: list[int]) -> None:
            self.listed = listed

        def holds(self, pid: int) -> bool:
            return False

        def pids(self) -> list[int]:
            return self.listed

    assert not left(Group([42]), 42)
    assert left(Group([]), 42)
