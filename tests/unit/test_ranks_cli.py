"""``run --nproc-per-node`` and friends at the CLI: what is refused before any rank starts,
and the exit code of a run whose ranks came back (the launcher answered by a fake)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offloadprobe.core.job import WorkerResult
from offloadprobe.core.verdicts import judge
from tests.conftest import TINY
from tests.fakes import install_child
from tests.unit import reporter_fakes as fake


@pytest.fixture
def ranks_answer(monkeypatch):
    """Make the launcher worker answer with a given world report instead of starting ranks."""
    answered = {}

    def launcher(job, spec):
        answered["how"] = job.launch
        report = answered["report"]
        code = judge(report.runs[0])[0].exit_code
        WorkerResult(exit_code=code, report=report.to_dict()).write(job.result_path(None))
        return code, ""

    install_child(monkeypatch, launcher)
    return answered


def test_a_rank_that_failed_exits_1_with_its_verdict(invoke, ranks_answer):
    world_run = fake.world_run()
    ranks = list(world_run.world.ranks)
    stuck = fake.not_offloaded_run().residency
    ranks[1] = replace(ranks[1], residency=stuck)
    bad = replace(world_run, world=replace(world_run.world, ranks=ranks))
    ranks_answer["report"] = fake.report(bad, emulated=True)
    rc, stdout, stderr = invoke("run", "--nproc-per-node", "2", *TINY)
    assert rc == 1
    assert "rank 1: param_data" in stderr.strip().splitlines()[-1]
    assert "node 0: measured" in stdout


def test_every_rank_ok_exits_0(invoke, ranks_answer):
    ranks_answer["report"] = fake.report(fake.world_run(), emulated=True)
    rc, _, stderr = invoke("run", "--nproc-per-node", "2", *TINY)
    assert rc == 0, stderr
    assert ranks_answer["how"].nproc_per_node == 2


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--nproc-per-node", "3", "--tp", "2"], {}, "3 ranks cannot hold tp 2"),
        (["--nproc-per-node", "2", "--tp", "3"], {}, "--tp 3 does not divide --heads 4"),
        (["--tp", "2"], {}, "need several ranks"),
        (["--nproc-per-node", "2", "--nnodes", "2"], {}, "--rdzv-endpoint"),
        (["--nproc-per-node", "2", "--cp", "2"], {}, "TransformerEngine"),
        (["--nproc-per-node", "2"], {"WORLD_SIZE": "2"}, "under torchrun"),
    ],
)
def test_layouts_and_launches_that_cannot_work_exit_2_in_one_line(
    invoke, ranks_answer, monkeypatch, args, env, says
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rc, _, stderr = invoke("run", *args, *TINY)
    assert rc == 2
    assert says in stderr and len(stderr.strip().splitlines()) == 1
    assert "how" not in ranks_answer  # no rank was started
