"""The parent's reading of the job's cgroups on fake cgroup v1 files: a peak that reads
lower than the parent left it was reset inside the job (exact)."""

from offloadprobe.attach.groups import JobGroups, _Peak
from offloadprobe.measure.cgroup import MemoryGroup, PeakCounter


def _group(tmp_path, name, usage, peak):
    path = tmp_path / name
    path.mkdir(parents=True)
    (path / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (path / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (path / "memory.stat").write_text("total_cache 300\ntotal_shmem 100\n")
    return MemoryGroup(1, path)


def test_the_job_groups_peak_falling_is_a_reset_inside_the_job(tmp_path):
    groups = JobGroups(job=_group(tmp_path, "job", 700, 900))
    assert groups.node() == (700, 900) and groups.foreign_resets == []
    (groups.job.path / "memory.max_usage_in_bytes").write_text("800\n")
    assert groups.node() == (700, 800)
    assert groups.foreign_resets == ["job"] and groups.node_max == 900


def test_a_process_groups_peak_is_checked_against_the_parents_last_reset(tmp_path):
    groups = JobGroups(job=_group(tmp_path, "job", 700, 900))
    mine = _group(tmp_path, "job/p42", 500, 600)
    groups._peaks[mine.path] = _Peak(PeakCounter(mine.files))
    assert groups.reset(mine) == 0  # the fake file reads what v1's reset writes
    (mine.path / "memory.max_usage_in_bytes").write_text("650\n")
    assert groups.peak(mine) == 650 and groups.foreign_resets == []
    (mine.path / "memory.max_usage_in_bytes").write_text("510\n")  # someone wrote 0
    assert groups.peak(mine) == 510 and groups.foreign_resets == ["p42"]
    held = groups.held(mine)
    assert (held.usage, held.cache, held.held) == (500, 200, 300)  # shmem is held
