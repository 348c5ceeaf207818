"""The zygote's rules, on fakes: which pagemap entries are pages shared copy-on-write, and
which jobs may be forked (``engine.zygote``, ``isolation.zygote``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from offloadprobe.engine.zygote import present_runs, shared_runs
from offloadprobe.isolation import zygote

PRESENT, FILE, EXCLUSIVE = 1 << 63, 1 << 61, 1 << 56
ZERO = (0x3B36, 0x40000, 0x40200)  # the zero page, and a huge zero page's frames


def _entries(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_only_present_anonymous_pages_mapped_twice_are_shared():
    entries = _entries(
        PRESENT | 0x100,  # shared copy-on-write: copied
        PRESENT | 0x101,  # its neighbour: the same run
        PRESENT | EXCLUSIVE | 0x102,  # this process's own already
        PRESENT | FILE | 0x103,  # a file page (a private mapping never written)
        0,  # not present
        PRESENT | ZERO[0],  # the zero page: stays as it is
        PRESENT | 0x40010,  # inside the huge zero page
        PRESENT | 0x200,  # shared again: a run of its own
    )
    assert shared_runs(entries, ZERO) == [(0, 2), (7, 1)]


def test_a_run_at_either_end_is_kept_whole():
    entries = _entries(PRESENT | 1, PRESENT | 2, 0, PRESENT | 3)
    assert shared_runs(entries, ZERO) == [(0, 2), (3, 1)]
    assert shared_runs(_entries(), ZERO) == []


def test_present_runs_take_every_present_page():
    entries = _entries(PRESENT | FILE | 1, 0, PRESENT | 2, PRESENT | EXCLUSIVE | 3)
    assert present_runs(entries) == [(0, 1), (2, 2)]


def _job(device: str = "cpu", launch: object = None, ranked: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        launch=launch, rank_of_launch=ranked, config=SimpleNamespace(device=device)
    )


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(zygote, "_ZYGOTE", [])
    monkeypatch.setattr(zygote, "_FAILED", [])
    monkeypatch.setattr(zygote, "_COUNT", {"seen": 0, "expected": 0})


def test_one_process_in_cpu_emulation_is_forkable(fresh_state):
    assert zygote.forkable(_job(), {})
    assert not zygote.forkable(_job(launch=object()), {})  # torchrun's launcher
    assert not zygote.forkable(_job(ranked=True), {})  # a rank
    assert not zygote.forkable(_job(device="bogus"), {})  # bad input: a fresh worker says so


def test_cuda_is_never_forked(fresh_state, monkeypatch):
    monkeypatch.setattr(zygote, "guess_device", lambda requested: "cuda")
    assert not zygote.forkable(_job(device="auto"), {})


def test_a_job_whose_environment_differs_from_the_zygote_is_fresh(fresh_state, monkeypatch):
    running = SimpleNamespace(env={"PATH": "/bin", "COLUMNS": "80"})
    monkeypatch.setattr(zygote, "_ZYGOTE", [running])
    assert zygote.forkable(_job(), {"PATH": "/bin", "COLUMNS": "120"})  # inert
    assert zygote.forkable(_job(), {"PATH": "/bin", "PYTEST_CURRENT_TEST": "x"})
    assert not zygote.forkable(_job(), {"PATH": "/bin", "PYTHONPATH": "/src"})
    assert not zygote.forkable(_job(), {"PATH": "/usr/bin", "COLUMNS": "80"})
    assert not zygote.forkable(_job(), {"COLUMNS": "80"})  # one variable fewer


def test_a_zygote_that_failed_to_start_is_not_tried_again(fresh_state, monkeypatch):
    monkeypatch.setattr(zygote, "_FAILED", [True])
    assert not zygote.forkable(_job(), {})


def test_a_lone_worker_starts_fresh_the_second_forks(fresh_state, monkeypatch):
    asked: list[dict] = []

    def fork(request: dict) -> str:
        asked.append(request)
        return "forked"

    monkeypatch.setattr(zygote, "zygote", lambda env: SimpleNamespace(fork=fork))
    job = SimpleNamespace(**vars(_job()), folder=Path("/w"), path=Path("/w/j"))
    assert zygote.fork_worker(job, {}, "") is None  # the first: no zygote for one row
    assert zygote.fork_worker(job, {}, "/g/cgroup.procs") == "forked"
    assert asked[0]["procs"] == "/g/cgroup.procs" and asked[0]["out"] == "/w/stdout.log"


def test_rows_expected_fork_from_the_first(fresh_state, monkeypatch):
    monkeypatch.setattr(zygote, "zygote", lambda env: SimpleNamespace(fork=lambda r: "forked"))
    zygote.expect(2)
    job = SimpleNamespace(**vars(_job()), folder=Path("/w"), path=Path("/w/j"))
    assert zygote.fork_worker(job, {}, "") == "forked"
