import numpy as np
import pytest

from offloadprobe.measure.probes.cgroup import CgroupProbe, locate


def _fake_tree(tmp_path, proc_line, files):
    proc = tmp_path / "cgroup"
    proc.write_text(proc_line)
    root = tmp_path / "sys"
    for rel, value in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    return proc, root


def test_locates_v2_files(tmp_path):
    proc, root = _fake_tree(
        tmp_path,
        "0::/job/rank0\n",
        {"job/rank0/memory.current": "1000\n", "job/rank0/memory.peak": "5000\n"},
    )
    files = locate(proc, root)
    assert files.version == 2
    reading = CgroupProbe(files).end()
    assert (reading.current_after, reading.peak) == (1000, 5000)
    assert not reading.peak_is_phase_local


def test_locates_v1_files_and_resets_the_peak(tmp_path):
    proc, root = _fake_tree(
        tmp_path,
        "4:memory:/job\n0::/\n",
        {"memory/job/memory.usage_in_bytes": "700", "memory/job/memory.max_usage_in_bytes": "900"},
    )
    probe = CgroupProbe(locate(proc, root))
    probe.begin()
    reading = probe.end()
    assert reading.version == 1
    assert reading.current_after == 700
    assert reading.peak == 0  # the fake file was reset to 0 by begin()
    assert reading.peak_is_phase_local


def test_no_cgroup_gives_none(tmp_path):
    proc, root = _fake_tree(tmp_path, "0::/nowhere\n", {})
    assert locate(proc, root) is None
    assert CgroupProbe(None).end() is None


def test_real_cgroup_sees_a_held_allocation():
    probe = CgroupProbe()
    if probe.files is None:
        pytest.skip("no readable memory cgroup on this host")
    probe.begin()
    held = np.ones(128 * 2**20, dtype=np.uint8)
    reading = probe.end()
    del held
    assert reading.current_after > 0
    if reading.peak is not None:
        assert reading.peak >= reading.current_after * 0.5
