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
    result.stdout.re_match_lines([r"^naive \+ none: over budget: host peak \d\.\d\dx > 1\.50x$"])
    result.stdout.fnmatch_lines(["FAILED test_offload.py::test_naive - Failed: naive + none: *"])
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
    result.stdout.fnmatch_lines(["*FlipsOneBit + none: corrupted: *param_data differs*"])


def _readme_example() -> str:
    import re

    from tests.conftest import ROOT

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(b for b in blocks if "offload_budget" in b)


def test_readme_example_passes_for_a_correct_pair_fails_for_naive_or_legacy(pytester, monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    source = _readme_example()
    naive = source.replace('strategy="lazy"', 'strategy="naive"')
    legacy = source.replace('optimizer_strategy="complete"', 'optimizer_strategy="legacy"')
    assert naive != source and legacy != source
    pytester.makepyfile(test_ok=source, test_naive=naive, test_legacy=legacy)
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-rf", "--tb=short")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["FAILED test_legacy.py::*", "FAILED test_naive.py::*"])
    result.stdout.re_match_lines([r"^lazy \+ legacy: over budget: left on device .* > 0 B$"])
    result.stdout.re_match_lines(
        [r"^naive \+ complete: over budget: host peak \(parameters\) \d\.\d\dx > 1\.10x$"]
    )


def test_misspelt_marker_keyword_is_a_usage_error_naming_it(run_plugin):
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peek="1.1x")
def test_typo():
    pass
"""
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown keyword max_host_peek=; did you mean max_host_peak=?*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_budget_without_unit_in_the_fixture_is_one_line(run_plugin):
    result = run_plugin(
        """
def test_no_unit(offload_probe):
    offload_probe(strategy="lazy", max_host_peak="1.1")
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UsageError: offload_probe: max_host_peak= '1.1' has no unit*"])
    assert "plugin.py" not in result.stdout.str()
