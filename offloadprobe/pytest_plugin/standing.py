"""The measured verdict has the last word over the test it was measured for.

A marked test's worker has measured before the body runs (the autouse fixture), and an
``offload_probe`` call measures inside it. A verdict that is not ok fails the test
whatever comes after it: a body that skips, calls ``pytest.xfail`` or catches the
fixture's failure (``pytest_runtest_call``), an ``xfail`` marker (strict or not) or a
later fixture that skips (the outermost ``pytest_runtest_makereport``, which turns the
report pytest's skipping plugin made back into the failure). So does whatever the plugin
failed the test with before any verdict (a stored row it cannot gate by, a worker that
left no record: ``kept``). A test whose measurements all pass keeps its skips and
xfails as pytest reports them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

RESULT = pytest.StashKey[Any]()
"""The marker's measurement: its record and its failure (None when ok)."""
FAILED = pytest.StashKey[list[Any]]()
"""Every failure the plugin measured or raised for this test, in order."""
XFAIL_WORDS = "an xfail marker does not hold over a measured verdict that is not ok"
SKIP_WORDS = "skipped after it was measured, and the measured verdict stands"


class OffloadBudgetFailure:
    """What a marked test measured and its verdict when that is not ok (or, with
    ``raised``, what the plugin failed the test with before any verdict)."""

    def __init__(
        self, run: Any, reason: str, table: str, raised: BaseException | None = None
    ) -> None:
        self.run = run
        self.reason = reason
        self.table = table
        self.raised = raised


def keep(node: pytest.Item, failure: OffloadBudgetFailure) -> None:
    node.stash.setdefault(FAILED, []).append(failure)


@contextlib.contextmanager
def kept(node: pytest.Item) -> Iterator[None]:
    """Whatever the plugin fails a test with inside (a stored row it cannot gate by, a
    worker that left no record) stands over the test's skips and xfails, as a verdict."""
    try:
        yield
    except (pytest.fail.Exception, pytest.UsageError) as exc:
        said = exc.msg if isinstance(exc, pytest.fail.Exception) else f"UsageError: {exc}"
        keep(node, OffloadBudgetFailure(None, str(said), "", raised=exc))
        raise


def _passing_through(exc: BaseException) -> bool:
    """What the body may end with over a measured failure: stopping the session."""
    return isinstance(exc, KeyboardInterrupt | pytest.exit.Exception)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A measured verdict that is not ok fails the test after its body, whatever the body
    did: returned, raised, skipped, called ``pytest.xfail``, or caught the fixture's own
    failure. The body's own end is named in one line under the verdict."""
    try:
        result = yield
    except BaseException as exc:
        failed = item.stash.get(FAILED, [])
        if not failed or _passing_through(exc) or _its_own(exc, failed):
            raise
        why = f"{_ended(exc)}: the measured verdict stands"
    else:
        failed = item.stash.get(FAILED, [])
        if not failed:
            return result
        marked = item.stash.get(RESULT, (None, None))[1]
        why = None if failed[0] is marked else "the test body caught the failure and went on"
    _fail(item, failed, why)  # outside the handler: the body's end is one line, not a chain


def _its_own(exc: BaseException, failed: list[Any]) -> bool:
    """The fixture's failure, raised through the body as it was raised."""
    return any(
        exc is f.raised or (isinstance(exc, pytest.fail.Exception) and exc.msg == f.reason)
        for f in failed
    )


def _ended(exc: BaseException) -> str:
    if isinstance(exc, pytest.skip.Exception):
        return f"the test body skipped ({exc.msg})"
    if isinstance(exc, pytest.xfail.Exception):
        return f"the test body called xfail ({exc.msg})"
    said = (str(exc).splitlines() or [""])[0]
    return f"the test body raised {type(exc).__name__}" + (f": {said}" if said else "")


def _fail(item: pytest.Item, failed: list[Any], why: str | None) -> NoReturn:
    first = failed[0]
    stored = item.stash.get(RESULT, None)
    if stored is not None and stored[1] is first:  # the marker's (a fixture's call added it)
        item.add_report_section("call", "offloadprobe", first.table)
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    pytest.fail(first.reason + more + (f"\n{why}" if why else ""), pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Outermost: a measured test whose verdict is not ok is reported failed where an
    ``xfail`` marker (strict or not) or a skip after the measurement (a later fixture's)
    would report it expected to fail or skipped."""
    report = yield
    failed = item.stash.get(FAILED, [])
    hidden = report.skipped or hasattr(report, "wasxfail")
    if not failed or call.when == "teardown" or not hidden:
        return report
    if hasattr(report, "wasxfail"):
        del report.wasxfail
        report.sections.append(("offloadprobe", XFAIL_WORDS))
    if isinstance(report.longrepr, tuple):  # a skip's (path, line, reason)
        report.longrepr = f"{failed[0].reason}\n{SKIP_WORDS}: {report.longrepr[2]}"
        if failed[0].table:
            report.sections.append(("offloadprobe", failed[0].table))
    report.outcome = "failed"
    return report
