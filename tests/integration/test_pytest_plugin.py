"""The pytest plugin as its users drive it: through pytester, in a subprocess."""

from importlib import metadata

import pytest

pytest_plugins = ["pytester"]

SMALL = 'payload="48MiB", layers=2, seq_length=32, micro_batch=1, device="cpu"'


def _plugin_args() -> list[str]:
    installed = any(ep.name == "offloadprobe" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "offloadprobe.pytest_plugin.plugin"]


@pytest.fixture
def run_plugin(pytester, monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(source: str):
        pytester.makepyfile(test_offload=source)
        return pytester.runpytest_subprocess(*_plugin_args(), "-q", "-rf", "--tb=short")

    return go


def test_marker_fails_naive_with_one_line_and_passes_lazy(run_plugin):
    result = run_plugin(
        f"""
import pytest

@pytest.mark.offload_budget(strategy="naive", max_host_peak="1.5x", {SMALL})
def test_naive():
    pass

@pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.5x", {SMALL})
def test_lazy(offload_run):
    assert offload_run.summary.integrity_ok
    assert offload_run.summary.host_peak_x <= 1.5
"""
    )
    result.assert_outcomes(passed=1, failed=1)
    # the failure's whole explanation is one line, the breached budget
    result.stdout.re_match_lines([r"^host peak \d\.\d\dx payload > limit 1\.50x$"])
    result.stdout.fnmatch_lines(["FAILED test_offload.py::test_naive - Failed: host peak *"])
    result.stdout.fnmatch_lines(["*Captured offloadprobe call*", "*cycle*phase*host peak*"])


def test_fixture_with_a_user_strategy(run_plugin):
    result = run_plugin(
        f"""
def test_user(offload_probe):
    # a fresh host copy per offload, the old one dropped after: about 2x at its peak
    run = offload_probe(strategy="tests.integration.user_strategies:keep_on_host",
                        max_host_peak="2.5x", {SMALL})
    assert run.summary.integrity_ok
"""
    )
    result.assert_outcomes(passed=1)


def test_child_that_corrupts_fails_the_test(run_plugin):
    result = run_plugin(
        f"""
def test_broken(offload_probe):
    offload_probe(strategy="tests.integration.user_strategies:FlipsOneBit", {SMALL})
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*offloadprobe run failed*corrupted data*"])
