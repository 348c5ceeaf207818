"""Bad input: one line naming the problem and the fix, exit code 2, no traceback.

Run in this process through the real entry point (``invoke``); one case also goes
through ``python -m offloadprobe`` so the console script's own stderr is covered.
"""

import pytest
import torch

pytestmark = pytest.mark.processes(1)  # the console entry point

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
    "unknown optimizer strategy": (
        ["run", "--optimizer-strategy", "legasy"],
        "choose one of legacy, fixed, complete, none",
    ),
    "bad host-peak budget": (["run", "--max-host-peak", "1.5"], "has no unit"),
    "bad hugepin option": (
        ["run", "--strategy", "hugepin", "--strategy-option", "touch_first=maybe"],
        "touch_first='maybe': choose 1 or 0",
    ),
    "unknown relock option": (
        ["compare", "lazy", "relock", "--strategy-option", "registrar=2", "--device", "cpu"],
        "--strategy-option registrar: hugepin and relock take",
    ),
    "bad pipelined option": (
        ["run", "--strategy", "pipelined", "--strategy-option", "threads=many"],
        "take integers",
    ),
    "unknown compare baseline": (
        ["compare", "naive", "lazy", "--baseline", "registered", "--device", "cpu"],
        "--baseline 'registered' is not one of the compared rows",
    ),
}


def _assert_one_line_usage_error(result, expected: str) -> None:
    out = result.stderr + result.stdout
    assert result.exit_code == 2, out
    assert len(result.error_lines) == 1, out
    assert "Traceback" not in out
    assert result.error_lines[0].startswith("offloadprobe: error: ")
    assert expected in result.error_lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(invoke, fake_runner, case):
    args, expected = CASES[case]
    _assert_one_line_usage_error(invoke(*args), expected)
    assert fake_runner.configs == []  # refused before any work started


def test_console_entry_point_prints_the_same_one_line(cli):
    proc = cli("run", "--strategy", "lasy")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert lines == [lines[0]] and lines[0].startswith("offloadprobe: error: ")
    assert "choose one of naive, lazy" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_cuda_requested_without_cuda(invoke, fake_runner):
    result = invoke("run", "--device", "cuda")
    assert result.exit_code == 2
    assert len(result.error_lines) == 1
    assert "no usable CUDA device" in result.stderr and "--device cpu" in result.stderr
    assert fake_runner.configs == []


def test_help_lists_the_verbs(invoke):
    result = invoke("--help")
    assert result.exit_code == 0
    for verb in ("run", "compare", "plan", "repro"):
        assert verb in result.stdout


def test_no_arguments_prints_help(invoke):
    result = invoke()
    assert result.exit_code == 0
    assert "Usage" in result.stdout


MEASURING = {
    "run": ["run", "--strategy", "lazy", "--device", "cpu"],
    "compare": ["compare", "naive", "lazy", "--device", "cpu"],
    "repro": ["repro", "ci-small", "--device", "cpu"],
    "plan --probe --strategy": ["plan", "--probe", "--strategy", "lazy", "--device", "cpu"],
}
INSTALL = "pip install 'offloadprobe[megatron]'"


@pytest.mark.parametrize("verb", sorted(MEASURING))
def test_a_measuring_verb_without_megatron_core_says_how_to_install_it(
    invoke, fake_runner, monkeypatch, verb
):
    """A light install (``pip install offloadprobe``: no torch, no megatron-core), as the
    check finds it: every verb that builds megatron's objects refuses before it starts."""
    from offloadprobe.core import extras

    monkeypatch.setattr(extras, "_found", lambda module: module != "megatron.core")
    result = invoke(*MEASURING[verb])
    _assert_one_line_usage_error(
        result, f"offloadprobe {verb} needs megatron-core, not installed here: {INSTALL}"
    )
    assert fake_runner.configs == []


def test_alloc_conf_without_torch_says_how_to_install_it(invoke, monkeypatch):
    from offloadprobe.core import extras

    monkeypatch.setattr(extras, "_found", lambda module: module != "torch")
    result = invoke("alloc-conf")
    _assert_one_line_usage_error(result, f"alloc-conf needs torch, not installed here: {INSTALL}")


def test_a_missing_torch_on_an_unguarded_path_is_the_same_one_line(invoke, monkeypatch):
    """The boundary's net: a verb that imports torch where no check stood before it."""
    import sys

    from offloadprobe.core import extras

    monkeypatch.setattr(extras, "require", lambda *a, **k: None)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ModuleNotFoundError
    result = invoke("alloc-conf")
    _assert_one_line_usage_error(result, "offloadprobe alloc-conf needs torch, not installed here")
    assert INSTALL in result.stderr
