"""The zero before any strategy code and the reference over optimizer state, on CUDA
(issue 35, points 4 and 7; marker ``cuda``): honest rows count no pre-offload growth and
read no figure below the zero; a forward hook's host block in cycle 0's train phase
counts; a moment set to +inf where the batch does not reach is corrupted."""

import json

import pytest

from tests.integration.zero_strategies import GrabsMoreInFirstTrain

pytestmark = pytest.mark.cuda

MODEL = ["--layers", "2", "--payload", "256MiB", "--seq-length", "64", "--cycles", "2"]
COMMON = ["run", "--device", "cuda", "--no-progress", *MODEL]


def _run(cli, tmp_path, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "run.json"
    proc = cli(*COMMON, *args, "--json", str(out))
    return proc.returncode, json.loads(out.read_text())["runs"][0], proc.stderr


@pytest.mark.parametrize("reference", ["--reference-check", "--no-reference-check"])
def test_an_honest_row_counts_no_pre_offload_growth(cli, tmp_path, reference):
    code, run, err = _run(cli, tmp_path, "--strategy", "lazy", reference)
    assert code == 0, err
    assert run["framework_growth_bytes"] is not None
    assert run["pre_offload_counted_bytes"] == 0, (run["pre_offload_growth_bytes"], run)
    assert run["summary"]["steady_host_bytes"] >= 0


def test_a_hooks_host_block_before_the_first_offload_counts(cli, tmp_path):
    spec = "tests.integration.zero_strategies:GrabsMoreInFirstTrain"
    grab = GrabsMoreInFirstTrain.size
    code, run, err = _run(cli, tmp_path, "--strategy", spec, "--no-reference-check")
    assert code == 0, err
    assert run["pre_offload_counted_bytes"] >= 0.9 * grab
    # the pageable copy (1x) and the block: at least both, less 10% of the block
    assert run["summary"]["steady_host_bytes"] >= run["payload_bytes"] + 0.9 * grab


def test_an_infinite_moment_where_the_batch_does_not_reach_is_corrupted(cli, tmp_path):
    spec = "tests.integration.diverging_optimizer:InfMomentWhereTheBatchDoesNotReach"
    code, run, err = _run(cli, tmp_path, "--strategy", "lazy", "--optimizer-strategy", spec)
    assert code == 1, err
    assert run["outcome"]["kind"] == "corrupted", run["outcome"]
    assert any("exp_avg_sq differs from the no-offload run's" in p for p in run["integrity"])
    assert any("non-finite value" in p for p in run["integrity"])
