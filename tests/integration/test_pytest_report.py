"""The pytest plugin's report of a failed test agrees with its failure line: the same
multiple for the same peak, no second meaning of "payload", no "ok" under a failure.
Through pytester in this process, the worker faked (the report's logic only)."""

from __future__ import annotations

from importlib import metadata

from tests.fakes import FakeChild, import_all, install_child

import_all()  # before pytester's snapshot of sys.modules

pytest_plugins = ["pytester"]


def _plugin_args() -> list[str]:
    installed = any(ep.name == "offloadprobe" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "offloadprobe.pytest_plugin.plugin"]


def test_a_failed_tests_report_speaks_the_failure_lines_terms(pytester, monkeypatch):
    child = install_child(monkeypatch, FakeChild())
    child.runs["naive"] = dict(host_peak_x=2.1)
    pytester.makepyfile(
        test_offload="""
def test_naive(offload_probe):
    offload_probe(strategy="naive", max_host_peak="1.5x", payload="16MiB")
"""
    )
    result = pytester.runpytest_inprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = text.split("Captured offloadprobe call", 1)[1]
    result.stdout.fnmatch_lines(["naive + none: over budget: host peak 2.10x > 1.50x"])
    lines = section.splitlines()
    assert any(line.startswith("naive + none: over budget") for line in lines)
    assert any(line.startswith("parameters") and "2.10x" in line for line in lines)
    assert "payload" not in section
    assert "ok" not in section.replace("bytes", "").split()  # no verdict word "ok"
    assert "bit-exact" not in section
