"""The zygote's rules, on fakes: which pagemap entries are pages shared copy-on-write, and
which jobs may be forked (``engine.zygote``, ``isolation.zygote``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from offloadprobe.core import devices
from offloadprobe.engine.forking import present_runs, shared_runs
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


def _job(
    device: str = "cpu", launch: object = None, ranked: bool = False, engine: str = "megatron"
) -> SimpleNamespace:
    return SimpleNamespace(
        launch=launch,
        rank_of_launch=ranked,
        config=SimpleNamespace(device=device, engine=engine),
        folder=Path("/w"),
        path=Path("/w/job.json"),
    )


ENGINES_STARTED: list[str] = []
"""The engine of each zygote the ``started`` fixture's fake started, in order."""


@pytest.fixture
def started(monkeypatch) -> list[dict]:
    """No zygote runs or failed; starting one records its environment instead."""
    ENGINES_STARTED.clear()
    monkeypatch.setattr(zygote, "_ZYGOTES", {})
    monkeypatch.setattr(zygote, "_FAILED", [])
    monkeypatch.setattr(zygote, "_SEEN", {})
    monkeypatch.setattr(zygote, "_EXPECTED", [0])
    monkeypatch.setattr(zygote, "_SESSION", [False])  # this test session said it is one
    monkeypatch.setattr(devices, "has_gpu", lambda: False)
    made: list[dict] = []

    def fake(env: dict, engine: str = "megatron") -> SimpleNamespace:
        made.append(env)
        ENGINES_STARTED.append(engine)
        return SimpleNamespace(
            env=env,
            alive=lambda: True,
            wait_ready=lambda: True,
            close=lambda: None,
            fork=lambda request: ("forked", len(made), request),
        )

    monkeypatch.setattr(zygote, "Zygote", fake)
    return made


def test_one_process_or_a_launcher_in_cpu_emulation_is_forkable(started):
    assert zygote.forkable(_job())
    assert zygote.forkable(_job(launch=object()))  # the launcher of ranks (it forks them)
    assert not zygote.forkable(_job(ranked=True))  # a rank
    assert not zygote.forkable(_job(device="bogus"))  # bad input: a fresh worker says so


def test_cuda_is_never_forked(started, monkeypatch):
    monkeypatch.setattr(devices, "guess_device", lambda requested: "cuda")
    assert not zygote.forkable(_job(device="auto"))


def test_nothing_is_forked_on_a_gpu_host(started, monkeypatch):
    monkeypatch.setattr(devices, "has_gpu", lambda: True)
    assert not zygote.forkable(_job(device="cpu"))


def test_a_zygote_that_failed_to_start_is_not_tried_again(started, monkeypatch):
    monkeypatch.setattr(zygote, "_FAILED", [True])
    assert not zygote.forkable(_job())
    assert zygote.fork_worker(_job(), {}, "") is None
    assert not started


def test_a_lone_worker_starts_fresh_the_second_of_its_environment_forks(started):
    env = {"PATH": "/bin"}
    assert zygote.fork_worker(_job(), env, "") is None  # alone: no zygote for one row
    assert zygote.fork_worker(_job(), {"PATH": "/usr/bin"}, "") is None  # another env
    kind, _, request = zygote.fork_worker(_job(), {**env, "COLUMNS": "80"}, "/g/cgroup.procs")
    assert kind == "forked" and started == [{**env, "COLUMNS": "80"}]
    assert request["procs"] == "/g/cgroup.procs" and request["out"] == "/w/stdout.log"
    assert request["env"] == {**env, "COLUMNS": "80"}  # the job's own values, inert or not


def test_each_environment_has_a_zygote_of_its_own(started):
    a, b = {"PATH": "/bin"}, {"PATH": "/bin", "PYTHONPATH": "/src"}
    for env in (a, a, b, b, a, b):
        zygote.fork_worker(_job(), env, "")
    assert started == [a, b]  # started once each, from their second job on
    c = {"TMPDIR": "/scratch"}
    zygote.fork_worker(_job(), c, "")
    zygote.fork_worker(_job(), c, "")
    assert started == [a, b, c] and list(zygote._ZYGOTES) == [zygote._key(b), zygote._key(c)]


def test_a_session_forks_every_worker_from_the_first_of_each_environment(started):
    zygote.expect_a_session()
    assert zygote.fork_worker(_job(), {}, "")[0] == "forked"
    assert zygote.fork_worker(_job(), {"X": "1"}, "")[1] == 2  # the first of another env
    assert zygote.fork_worker(_job(), {}, "")[1] == 2  # its zygote kept: none started
    assert started == [{}, {"X": "1"}]


def test_rows_expected_fork_from_the_first(started):
    zygote.expect(3)
    assert zygote.fork_worker(_job(), {}, "")[0] == "forked"
    assert zygote._EXPECTED == [0]  # taken by that row
    assert zygote.fork_worker(_job(), {"X": "1"}, "") is None  # another env, alone


def test_each_engine_has_a_zygote_of_its_own(started):
    """A zygote imported one engine's modules before its zero: a worker of another engine
    is never forked from it (its host figures would count those imports)."""
    env = {"PATH": "/bin"}
    for engine in ("megatron", "fsdp2", "megatron"):
        zygote.expect(2)  # rows of a compare: the first of each forks too
        assert zygote.fork_worker(_job(engine=engine), env, "") is not None
    assert ENGINES_STARTED == ["megatron", "fsdp2"]
    assert started == [env, env]
