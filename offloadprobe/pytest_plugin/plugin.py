"""The ``offload_budget`` marker and the ``offload_run`` / ``offload_probe`` fixtures.

Example (paste into a test file; either strategy may be your own ``module:object``)::

    import pytest

    @pytest.mark.offload_budget(
        strategy="lazy", optimizer_strategy="complete", precision_aware=True,
        max_host_peak="1.1x", max_gpu_residual="0", payload="16MiB",
    )
    def test_offload_stays_within_budget(offload_run):
        assert offload_run.summary.integrity_ok

Each marked test runs the pair of strategies on the probe model in a fresh process (so
no pinned cache carries over), then fails with the row's one-line verdict, such as
``naive + complete: over budget: host peak (parameters) 2.00x > 1.10x``, when anything
is not ok (a broken budget, corrupted data, a crash, an OOM, nothing offloaded); the full
phase table is attached to the report as the "offloadprobe" section. A misspelt keyword
or an unparsable budget is a ``pytest.UsageError`` that names the keyword.

The measured verdict has the last word over the test: a body that skips, calls
``pytest.xfail`` or catches the fixture's failure, an ``xfail`` marker, or a fixture that
skips after the measurement cannot turn a measured failure into a skip, an xfail or a
pass (``pytest_runtest_call`` and the outermost ``pytest_runtest_makereport`` below).

Against a stored run, as ``--baseline-json PATH --max-increase 5%`` on the command line:
``baseline_json="ci/offload.json", max_increase="5%"`` fails the test when the row's host
peak, steady host, pinned or GPU-left bytes grew by more than 5% over the stored row of
the same label (``lazy + none``), with both figures and the change; ``baseline_row="lazy
+ complete"`` names another stored row. A stored result without that row errors the test
with one line naming the row and the rows the file has.

Across sessions, as pytest-benchmark's options: ``--offloadprobe-save=NAME`` stores every
measured marked test's record, ``--offloadprobe-compare=NAME`` holds each marked test to
its own stored record (``stored.py``).
"""

from __future__ import annotations

import difflib
import io
import os
import re
from collections.abc import Sequence
from typing import Any

import pytest

from offloadprobe.pytest_plugin.standing import (  # the hooks: pytest finds them here
    RESULT,
    OffloadBudgetFailure,
    keep,
    kept,
    pytest_runtest_call,
    pytest_runtest_makereport,
)

MARKER = "offload_budget"
_STORAGE = pytest.StashKey[Any]()
__all__ = ["OffloadBudgetFailure", "pytest_runtest_call", "pytest_runtest_makereport"]
PLUGIN_DEFAULTS = {"cycles": 2}
"""Where the marker's default differs from the command line's (a test wants it quick)."""


def keywords() -> frozenset[str]:
    """Every keyword the marker takes: the option model's plugin options and the names."""
    from offloadprobe.core.options import PLUGIN
    from offloadprobe.core.options import keywords as option_keywords

    return option_keywords(PLUGIN) | {"strategy", "optimizer_strategy"}


def pytest_addoption(parser: pytest.Parser) -> None:
    from offloadprobe.pytest_plugin.stored import COMPARE, INCREASE, SAVE

    group = parser.getgroup("offloadprobe", "offload-memory budgets (offloadprobe)")
    group.addoption(
        SAVE,
        metavar="NAME",
        default=None,
        help="Store every measured offload_budget test's record as JSON: "
        ".offloadprobe/NAME.json under the rootdir, or a PATH (one with a folder or "
        "ending in .json).",
    )
    group.addoption(
        COMPARE,
        metavar="NAME",
        default=None,
        help=f"Hold every offload_budget test to its own record in a file {SAVE} wrote "
        "(NAME or PATH): a host peak, steady host, pinned or GPU-left figure grown by "
        f"more than {INCREASE} fails it as regressed; a test the file has no record of "
        "is an error.",
    )
    group.addoption(
        INCREASE,
        metavar="PCT",
        default="5%",
        help=f"How much a figure may grow over its {COMPARE} record (default: 5%%).",
    )


def pytest_configure(config: pytest.Config) -> None:
    from offloadprobe.core.errors import UsageError
    from offloadprobe.pytest_plugin.stored import COMPARE, INCREASE, SAVE, Storage

    try:
        storage = Storage.from_options(
            config.getoption(SAVE),
            config.getoption(COMPARE),
            config.getoption(INCREASE),
            config.rootpath,
            worker=hasattr(config, "workerinput"),
        )
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STORAGE] = storage
    if storage.save is not None or storage.compare is not None:
        config.pluginmanager.register(storage, "offloadprobe-storage")
    config.addinivalue_line(
        "markers",
        f"{MARKER}(strategy='lazy', max_host_peak=None, max_gpu_residual=None, "
        "min_offload_bandwidth=None, payload=None, cycles=2, device='auto', ...; every "
        "option of offloadprobe run, by its Python name; baseline_row= the stored row "
        "baseline_json= holds it to): run an "
        "offload strategy on offloadprobe's megatron-core model in a fresh process and fail "
        "the test when a budget breaks",
    )


def check_options(options: dict[str, Any], *, where: str = MARKER) -> list[Any]:
    """Every keyword known and every budget parsable, else a ``pytest.UsageError`` that
    names the keyword (and the nearest valid one); returns the budgets."""
    from offloadprobe.core.errors import UsageError
    from offloadprobe.core.option_budgets import budgets
    from offloadprobe.core.options import BUDGET_NAMES
    from offloadprobe.pytest_plugin.up_front import check_up_front

    known = keywords()
    for key in sorted(set(options) - known):
        near = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean {near[0]}=?" if near else ""
        valid = ", ".join(sorted(known))
        raise pytest.UsageError(f"{where}: unknown keyword {key}={hint} (valid: {valid})")
    row = options.get("baseline_row")
    if row is not None and (not isinstance(row, str) or not row.strip()):
        raise pytest.UsageError(
            f"{where}: baseline_row= takes a stored row's label, like 'lazy + none', got {row!r}"
        )
    if row is not None and options.get("baseline_json") is None:
        raise pytest.UsageError(
            f"{where}: baseline_row= names a row of baseline_json=: give baseline_json= too"
        )
    values = {k: options.get(k) for k in BUDGET_NAMES}
    if isinstance(values.get("baseline_json"), os.PathLike):
        values["baseline_json"] = os.fspath(values["baseline_json"])
    for key, value in values.items():
        if value is not None and not isinstance(value, str):
            raise pytest.UsageError(f"{where}: {key}= takes a string like '1.1x', got {value!r}")
    try:
        check_up_front(options)  # conflicting keywords, each strategy: torch-free
        return budgets(values).budgets
    except UsageError as exc:
        raise pytest.UsageError(f"{where}: {_keyword_words(str(exc))}") from None


def _keyword_words(message: str) -> str:
    """A message about ``--max-host-peak`` or ``--payload`` in the marker's words
    (``max_host_peak=``, ``payload=``)."""
    from offloadprobe.core.options import OPTIONS

    for option in sorted(OPTIONS, key=lambda o: -len(o.cli_flag)):
        message = re.sub(rf"{re.escape(option.cli_flag)}\b(?!-)", f"{option.name}=", message)
    return message


def _config(options: dict[str, Any]) -> Any:
    """The marker's options as the run configuration the worker reads."""
    from offloadprobe.core.options import BUDGET_NAMES, build_config

    skip = {"strategy", "optimizer_strategy", "timeout", "nproc_per_node", "baseline_row"}
    skip |= set(BUDGET_NAMES)
    values = {**PLUGIN_DEFAULTS, **{k: v for k, v in options.items() if k not in skip}}
    return build_config(
        values,
        strategy=str(options.get("strategy", "lazy")),
        optimizer_strategy=str(options.get("optimizer_strategy", "none")),
    )


def _render(run: Any, judged: Any, emulated: bool) -> str:
    """The failed test's report: the row's verdict (the failure line's own words), each
    part's figures as multiples of the bytes it moves (the budgets' terms), then the
    phases in bytes: one meaning of every multiple, and no "ok" under a failure."""
    from rich.console import Console

    from offloadprobe.report.run_summary import summary_block
    from offloadprobe.report.table import phase_table

    buffer = io.StringIO()
    console = Console(file=buffer, width=120, no_color=True, force_terminal=False)
    console.print(summary_block(run, judged))
    console.print(phase_table(run, gpu=not emulated, multiples=False))
    return buffer.getvalue()


def _held(budgets: list[Any], row: str) -> list[Any]:
    """The marker's regression gate holding the run to the stored ``row``; one line
    naming the row and the rows the file has where it has none of that label."""
    from offloadprobe.core.errors import UsageError
    from offloadprobe.core.regression import FLAG, RegressionBudget

    held, problem = [], None
    for budget in budgets:
        if isinstance(budget, RegressionBudget) and budget.flag == FLAG:
            try:
                budget = budget.held_to(row)
            except UsageError as exc:
                problem = f"{MARKER}: {exc}: name the stored row with baseline_row="
                break
        held.append(budget)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return held


def measure_row(options: dict[str, Any], extra: Sequence[Any] = ()) -> Any:
    """Run one pair of strategies in a fresh worker, judged by the options' budgets and
    ``extra`` ones (``--offloadprobe-compare``'s); the judged row."""
    from offloadprobe.core import extras
    from offloadprobe.core.devices import guess_device
    from offloadprobe.core.errors import UsageError
    from offloadprobe.isolation.rows import measure
    from offloadprobe.pytest_plugin.up_front import check_stored_payload

    lacking = extras.missing()
    if lacking:
        raise pytest.UsageError(extras.message(MARKER, lacking))
    budgets = check_options(options)
    try:
        config = _config(options)
    except UsageError as exc:
        raise pytest.UsageError(f"{MARKER}: {_keyword_words(str(exc))}") from None
    from offloadprobe.core.records import row_label

    label = row_label(config.strategy, config.optimizer_strategy, config.engine)
    budgets = _held(budgets, str(options.get("baseline_row") or label)) + list(extra)
    try:  # every stored row it is held to (baseline_row=, its --offloadprobe-compare record)
        check_stored_payload(budgets, config)  # before the worker starts
    except UsageError as exc:
        raise pytest.UsageError(f"{MARKER}: {_keyword_words(str(exc))}") from None
    return measure(
        config,
        device=guess_device(config.device),
        budgets=budgets,
        timeout_s=options.get("timeout"),
    )


def verdict_of(row: Any) -> tuple[Any, OffloadBudgetFailure | None]:
    """A measured row's record and, when its verdict is not ok, why."""
    label = row.label
    run = row.run if row.outcome.report is not None else None
    if run is None or row.verdict.ok:
        if not row.verdict.ok:
            pytest.fail(f"{label}: {row.verdict.line()}\n{row.outcome.stderr_tail}", pytrace=False)
        return run, None
    table = _render(run, row.verdict, row.report.emulated)
    return run, OffloadBudgetFailure(run, f"{label}: {row.verdict.line()}", table)


def probe(**options: Any) -> tuple[Any, OffloadBudgetFailure | None]:
    """Run one pair of strategies in a fresh worker; return its record and, when the row's
    verdict is not ok, why."""
    return verdict_of(measure_row(options))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every marker's keywords before anything runs. With two offload tests or more,
    the session's CPU-emulation workers all fork from a zygote (``isolation.zygote``): the
    first pays no fresh interpreter's imports beside it. Not in a pytest-xdist worker: it
    collects every test but runs the ones it is handed, maybe one (a zygote started for a
    lone test would cost a fresh interpreter's imports and stay resident)."""
    probes = 0
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is not None:
            check_options(marker.kwargs, where=f"{item.nodeid}: {MARKER}")
        probes += marker is not None or "offload_probe" in getattr(item, "fixturenames", ())
    if probes >= 2 and not hasattr(config, "workerinput"):
        from offloadprobe.isolation import zygote

        zygote.expect_a_session()


@pytest.fixture(autouse=True)
def _offload_budget_marker(request: pytest.FixtureRequest) -> None:
    """A marked test's measurement, before the test: held to its stored record too under
    ``--offloadprobe-compare``, and kept for ``--offloadprobe-save``."""
    from offloadprobe.core.errors import UsageError

    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return
    storage = request.config.stash.get(_STORAGE, None)
    test = request.node.nodeid
    problem = gate = None
    with kept(request.node):
        try:
            gate = storage.gate(test) if storage is not None else None
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        row = measure_row(marker.kwargs, [gate] if gate is not None else [])
        if storage is not None:
            storage.measured(request.node, test, row)
        found = verdict_of(row)
    request.node.stash[RESULT] = found
    if found[1] is not None:
        keep(request.node, found[1])


@pytest.fixture
def offload_run(request: pytest.FixtureRequest) -> Any:
    """The ``RunRecord`` the ``offload_budget`` marker measured for this test."""
    if RESULT not in request.node.stash:
        raise pytest.UsageError("offload_run needs the test to carry @pytest.mark.offload_budget")
    return request.node.stash[RESULT][0]


@pytest.fixture
def offload_probe(request: pytest.FixtureRequest):
    """Call ``offload_probe(strategy=..., max_host_peak=..., payload=...)`` in a test."""

    def run(**options: Any) -> Any:
        __tracebackhide__ = True
        problem = None
        with kept(request.node):
            try:
                check_options(options, where="offload_probe")
            except pytest.UsageError as exc:  # misuse inside a test: one line, no traceback
                problem = f"UsageError: {exc}"
            if problem is not None:
                pytest.fail(problem, pytrace=False)
            record, failure = probe(**options)
        if failure is not None:
            keep(request.node, failure)
            request.node.add_report_section("call", "offloadprobe", failure.table)
            pytest.fail(failure.reason, pytrace=False)
        return record

    return run
