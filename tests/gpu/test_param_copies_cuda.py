"""On the GPU: a copy of the parameters hung off the optimizer is the parameters' (issue
35, point 1), found by content in PyTorch's allocator's own blocks
(``torch.cuda.memory_snapshot``, read through a storage over each block's address), and
an honest strategy's offload leaves no such copy.

The truth each figure is checked against: the bytes the strategy copied (0.24 of each
``param_data`` in a main parameter's ``decoupled_grad``, 0.24 more as a plain attribute of
another; all of it in a buffer of its own from its first load)."""

from __future__ import annotations

import json

import pytest

from tests.integration import ownership_strategies as own

pytestmark = pytest.mark.cuda

OWN = "tests.integration.ownership_strategies:"
RUN = ["run", "--device", "cuda", "--layers", "1", "--payload", "16MiB", "--train-steps", "0"]
RUN += ["--no-reference-check", "--no-progress"]


def _run(cli, tmp_path, *args: str):
    out = tmp_path / "run.json"
    proc = cli(*RUN, *args, "--json", str(out))
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())["runs"][0]


def test_a_copy_hung_off_the_optimizer_is_caught_on_cuda(cli, tmp_path):
    proc, run = _run(cli, tmp_path, "--strategy", OWN + "CopiesOnTheOptimizer", "--cycles", "1")
    assert proc.returncode == 1, proc.stderr
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    line = run["not_offloaded"][0]
    hung = "main_param.decoupled_grad (hung on the optimizer, not its own)"
    assert "by content" in line and hung in line and "stash on a main parameter" in line, line
    copied = own.CopiesOnTheOptimizer.share * run["residency"][0]["param_bytes_to_move"]
    found = run["residency"][0]["param_copies"]
    # each copy is a block of its own; the allocator rounds it up (512 B), the count is of
    # the copied bytes alone
    assert set(found) == {hung, "stash on a main parameter"}, found
    assert all(0.98 * copied <= n <= 1.02 * copied for n in found.values()), found


def test_a_copy_kept_from_the_first_load_is_caught_on_cuda(cli, tmp_path):
    proc, run = _run(cli, tmp_path, "--strategy", OWN + "CopiesAtItsFirstLoad", "--cycles", "2")
    assert proc.returncode == 1, proc.stderr
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    first, second = run["residency"]
    payload = second["param_bytes_to_move"]
    assert not first["param_copies"], first
    assert 0.98 * payload <= sum(second["param_copies"].values()) <= payload, second


@pytest.mark.parametrize("strategy", ["lazy", "pageable", "naive"])
def test_an_honest_offload_leaves_no_copy_on_cuda(cli, tmp_path, strategy):
    """Stale bytes in freed blocks are not read (only active blocks are), and a block the
    allocator hands out again is filled before use (the run's deterministic mode)."""
    proc, run = _run(cli, tmp_path, "--strategy", strategy, "--cycles", "2")
    assert proc.returncode == 0, proc.stderr
    for fact in run["residency"]:
        assert fact["param_copies"] == {}, fact
