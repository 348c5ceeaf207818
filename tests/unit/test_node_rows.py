"""Node rows from rank records and node cgroup readings (hand-built records, exact)."""

from __future__ import annotations

from dataclasses import replace

from offloadprobe.core.records import report_from_dict
from offloadprobe.measure.node import NodeSource, node_records, spread
from tests.unit import reporter_fakes as fake

MiB = fake.MiB


def _source(node: int, readings, cgroup: str | None = "cgroup v1 /x") -> NodeSource:
    return NodeSource(
        node_rank=node, hostname="vm", cgroup=cgroup, cgroup_missing=None, readings=readings
    )


def test_spread_skips_missing_values():
    found = spread([3, None, 1, 2])
    assert (found.min, found.mean, found.max, found.sum, found.ranks) == (1, 2, 3, 6, 3)
    assert spread([None, None]) is None


def test_node_peak_is_the_cgroup_peak_over_the_node_baseline():
    ranks = [fake.rank_run(0, 0, peak=256 * MiB), fake.rank_run(1, 0, peak=260 * MiB)]
    (node,) = node_records(ranks, [_source(0, fake.node_readings(384 * MiB))])
    assert node.ranks == [0, 1]
    assert node.baseline_bytes == 2 * fake.BASE
    assert node.peak_bytes == 384 * MiB
    assert node.rank_peak_sum_bytes == 516 * MiB
    peaks = node.figures["host_peak_bytes"]
    assert (peaks.min, peaks.max, peaks.sum) == (256 * MiB, 260 * MiB, 516 * MiB)
    assert node.peak_x == 384 * MiB / (2 * 128 * MiB)
    assert node.steady_bytes == 2 * 128 * MiB


def test_emulated_device_bytes_are_taken_out_of_the_node_figures():
    ranks = [fake.rank_run(r, 0, peak=256 * MiB) for r in (0, 1)]
    device = 100 * MiB

    def with_device(run):
        phases = [
            replace(
                p,
                host=replace(p.host, device_in_host_before=device, device_in_host_after=device),
            )
            for p in run.phases
        ]
        return replace(run, phases=phases)

    readings = [
        replace(
            r,
            usage_before=r.usage_before + 2 * device,
            peak=r.peak + 2 * device,
            usage_after=r.usage_after + 2 * device,
        )
        for r in fake.node_readings(384 * MiB)
    ]
    (node,) = node_records([with_device(r) for r in ranks], [_source(0, readings)])
    assert node.peak_bytes == 384 * MiB
    assert node.phases[0].emulated_device_bytes == 2 * device


def test_a_peak_that_cannot_be_reset_per_phase_gives_no_node_figure():
    ranks = [fake.rank_run(r, 0, peak=256 * MiB) for r in (0, 1)]
    (node,) = node_records(ranks, [_source(0, fake.node_readings(384 * MiB, local=False))])
    assert node.peak_bytes is None
    assert "reset" in node.cgroup_missing


def test_ranks_are_grouped_by_their_node_rank():
    ranks = [fake.rank_run(r, r // 2, peak=(r + 1) * MiB, world_size=4) for r in range(4)]
    sources = [_source(1, fake.node_readings(5 * MiB)), _source(0, fake.node_readings(2 * MiB))]
    nodes = node_records(ranks, sources)
    assert [n.node_rank for n in nodes] == [0, 1]
    assert [n.ranks for n in nodes] == [[0, 1], [2, 3]]
    assert nodes[1].figures["host_peak_bytes"].sum == 7 * MiB


def test_a_world_run_survives_its_json_form():
    report = fake.report(fake.world_run(), emulated=True)
    back = report_from_dict(report.to_dict())
    world = back.runs[0].world
    assert world.ranks[1].place.rank == 1
    assert world.nodes[0].peak_bytes == 384 * MiB
    assert world.nodes[0].figures["host_peak_bytes"].max == 260 * MiB
