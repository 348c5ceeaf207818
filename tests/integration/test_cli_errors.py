"""Bad input: one line naming the problem and the fix, exit code 2, no traceback."""

import pytest
import torch

CASES = {
    "unknown strategy": (["run", "--strategy", "lasy"], "choose one of naive, lazy"),
    "unparsable size": (["run", "--payload", "5 gigs"], "cannot parse --payload"),
    "heads do not divide hidden": (["run", "--hidden", "1000", "--heads", "16"], "does not divide"),
    "zero cycles": (["run", "--cycles", "0"], "--cycles must be at least 1"),
    "negative cycles": (["run", "--cycles", "-2"], "--cycles must be at least 1"),
    "unimportable user strategy": (["run", "--strategy", "nope_pkg_zz:S"], "cannot import"),
    "user strategy without load": (["run", "--strategy", "json:JSONDecoder"], "lacks offload"),
    "unknown option": (["run", "--strategyy", "lazy"], "--help"),
    "bad device": (["run", "--device", "tpu"], "--device must be"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(cli, case):
    args, expected = CASES[case]
    proc = cli(*args)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert expected in lines[0]
    assert lines[0].startswith("offloadprobe: error: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_cuda_requested_without_cuda(cli):
    proc = cli("run", "--device", "cuda")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "no usable CUDA device" in proc.stderr and "--device cpu" in proc.stderr


def test_help_lists_the_verbs(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    assert "run" in proc.stdout
