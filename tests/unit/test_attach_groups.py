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


def test_cgroup_v2_nests_each_process_beside_a_leaf_that_holds_it(tmp_path):
    """v2: a group that hands the memory controller down holds no process, so each
    process sits in ``leaf`` of its own group, and its children's groups sit beside."""
    job = tmp_path / "job"
    (job / "leaf").mkdir(parents=True)
    groups = JobGroups(job=MemoryGroup(2, job))
    rank = groups.place(42, 7, now=job / "leaf")
    assert rank is not None and rank.path == job / "p42"
    assert (job / "p42" / "cgroup.subtree_control").read_text() == "+memory"
    assert (job / "p42" / "leaf" / "cgroup.procs").read_text() == "42"
    worker = groups.place(43, 8, now=job / "p42" / "leaf")
    assert worker is not None and worker.path == job / "p42" / "p43"
    assert groups.home_of(42, 7) == job / "p42" and groups.home_of(42, 9) == job  # reused
    assert groups.home_of(44, 9, born=job / "p42" / "leaf") == job / "p42"
    assert groups.place(45, 9, now=tmp_path / "elsewhere") is None


def test_cgroup_v1_nests_each_process_in_the_group_it_was_in(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    groups = JobGroups(job=MemoryGroup(1, job))
    assert groups.place(42, 7, now=job).path == job / "p42"
    assert groups.place(43, 8, now=job / "p42").path == job / "p42" / "p43"
    assert (job / "p42" / "p43" / "cgroup.procs").read_text() == "43"
    assert groups.home_of(44, 9, born=job / "p42") == job / "p42"
