"""The zero of the host figures (core.host_zero), on hand-built records."""

import dataclasses

from offloadprobe.core.host_zero import counted_growth, negative_figures, negative_margin
from offloadprobe.core.records import HostReading, PhaseRecord
from offloadprobe.core.verdicts import exit_code, judge
from tests.unit.test_budgets import run

KiB, MiB = 2**10, 2**20


def test_growth_beyond_the_framework_and_the_noise_counts_whole():
    assert counted_growth(9 * MiB, MiB) == 8 * MiB
    assert counted_growth(3 * MiB, None) == 3 * MiB  # no train step ran: nothing to allow


def test_growth_within_the_noise_counts_nothing():
    # 1 MiB, and half the framework's own growth (two measurements of it differ so much)
    assert counted_growth(4 * MiB, 2 * MiB) == 0
    assert counted_growth(MiB, None) == 0
    assert counted_growth(-5 * MiB, 2 * MiB) == 0
    assert counted_growth(5 * MiB, -2 * MiB) == 5 * MiB  # a shrinking framework allows 0


def _below(steady: int, held: int | None = None, moved: int = 16 * MiB):
    record = run("pageable")
    summary = dataclasses.replace(
        record.summary, steady_host_bytes=steady, held_while_training_bytes=held, moved_bytes=moved
    )
    return dataclasses.replace(record, summary=summary)


def test_a_negative_steady_figure_beyond_the_noise_is_inconsistent():
    verdict, breaches = judge(_below(-int(0.02 * 16 * MiB)))  # -0.02x
    assert verdict.kind == "inconsistent" and breaches == []
    assert verdict.detail.startswith("steady host -327.68 KiB (-0.02x) is below the host")
    assert exit_code([verdict]) == 1


def test_every_negative_figure_is_named():
    lines = negative_figures(_below(-2 * MiB, held=-3 * MiB))
    assert [line.split(" -")[0] for line in lines] == ["steady host", "host held while training"]


def test_noise_below_the_zero_passes():
    assert negative_margin(16 * MiB) == 256 * KiB
    assert negative_margin(4 * 2**30) == 4 * 2**30 // 100
    assert judge(_below(-100 * KiB))[0].ok
    assert judge(_below(-40 * MiB, moved=8 * 2**30))[0].ok  # 1% of what moves


def _move(name: str, *, file_before: int, file_after: int, group: int | None = None):
    host = HostReading(
        rss_before=0,
        rss_after=0,
        peak=0,
        shmem_after=0,
        method="vmhwm",
        file_before=file_before,
        file_after=file_after,
        group_before=group,
        group_after=group,
    )
    return PhaseRecord(
        cycle=0,
        phase=name,
        seconds=1.0,
        bytes_moved=0,
        gbps=None,
        host=host,
        pinned=None,
        gpu=None,
        cgroup=None,
    )


def test_mapped_file_pages_the_kernel_dropped_are_no_inconsistency():
    """Process figures count RssFile: what it fell by over the moves is allowed besides."""
    dropped = [_move("offload", file_before=300 * MiB, file_after=297 * MiB)]
    dropped.append(_move("load", file_before=297 * MiB, file_after=298 * MiB))
    record = dataclasses.replace(_below(-2 * MiB), phases=dropped)
    assert judge(record)[0].ok
    kept = [_move("offload", file_before=300 * MiB, file_after=300 * MiB)]
    assert judge(dataclasses.replace(record, phases=kept))[0].kind == "inconsistent"
    # a group's figures count no page cache: nothing to allow
    grouped = [_move("offload", file_before=300 * MiB, file_after=290 * MiB, group=0)]
    assert judge(dataclasses.replace(record, phases=grouped))[0].kind == "inconsistent"
