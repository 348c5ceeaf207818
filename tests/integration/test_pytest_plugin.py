"""The pytest plugin as its users drive it, through pytester in this process.

Two tests start real children (the plugin's point is a fresh process per probe): a
budget breach and a corrupting strategy. The rest of the plugin's logic runs against
``FakeChild``.
"""

from importlib import metadata

import pytest

from tests.fakes import FakeChild, import_all, install_child

import_all()  # before pytester's snapshot of sys.modules, which drops what a test imports

pytest_plugins = ["pytester"]

REAL = 'payload="40MiB", layers=2, seq_length=32, micro_batch=1, train_steps=0, device="cpu"'
TINY = 'layers=1, hidden=128, heads=4, vocab=1024, seq_length=32, cycles=1, device="cpu"'


def _plugin_args() -> list[str]:
    installed = any(ep.name == "offloadprobe" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "offloadprobe.pytest_plugin.plugin"]


@pytest.fixture
def run_plugin(pytester, monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the children import tests.integration

    def go(source: str):
        pytester.makepyfile(test_offload=source)
        return pytester.runpytest_inprocess(*_plugin_args(), "-q", "-rf", "--tb=short",
                                            "-p", "no:cacheprovider")  # fmt: skip

    return go


@pytest.fixture
def fake_child(monkeypatch) -> FakeChild:
    return install_child(monkeypatch, FakeChild())


def test_real_children_breach_and_corruption_fail_with_one_line(run_plugin):
    result = run_plugin(
        f"""
import pytest

@pytest.mark.offload_budget(strategy="naive", max_host_peak="1.5x", {REAL})
def test_naive():
    pass

def test_broken(offload_probe):
    offload_probe(strategy="tests.integration.user_strategies:FlipsOneBit", {TINY})
"""
    )
    result.assert_outcomes(failed=2)
    # the budget failure's whole explanation is one line, the breached budget
    result.stdout.re_match_lines([r"^host peak \d\.\d\dx payload > limit 1\.50x$"])
    result.stdout.fnmatch_lines(["FAILED test_offload.py::test_naive - Failed: host peak *"])
    result.stdout.fnmatch_lines(["*Captured offloadprobe call*", "*cycle*phase*host peak*"])
    result.stdout.fnmatch_lines(["*offloadprobe run failed*corrupted data*"])


def test_marker_passes_within_budget_and_hands_over_the_run(run_plugin, fake_child):
    fake_child.runs["lazy"] = dict(host_peak_x=1.2)
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.5x", payload="64MiB")
def test_lazy(offload_run):
    assert offload_run.summary.integrity_ok
    assert abs(offload_run.summary.host_peak_x - 1.2) < 1e-6
"""
    )
    result.assert_outcomes(passed=1)
    (spec,) = fake_child.specs
    args = spec.args
    assert args[args.index("--strategy") + 1] == "lazy"
    assert args[args.index("--payload") + 1] == "64MiB"
    assert args[args.index("--cycles") + 1] == "2"  # the plugin's default


def test_fixture_returns_the_run_and_fails_on_a_breach(run_plugin, fake_child):
    fake_child.runs["mine:S"] = dict(host_peak_x=1.9)
    result = run_plugin(
        """
def test_user(offload_probe):
    run = offload_probe(strategy="mine:S", max_host_peak="2.5x")
    assert run.strategy == "mine:S" and run.summary.integrity_ok

def test_user_breach(offload_probe):
    offload_probe(strategy="mine:S", max_host_peak="1.5x")
"""
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *test_user_breach - Failed: host peak 1.90x*"])


def test_unknown_marker_option_is_a_usage_error(run_plugin, fake_child):
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peek="1.5x")
def test_typo(offload_run):
    pass
"""
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*unknown option(s) max_host_peek*"])
    assert fake_child.specs == []
