"""``--offloadprobe-save`` and ``--offloadprobe-compare``: every marked test's record, kept
in one JSON file and held to on a later session, as pytest-benchmark's ``--benchmark-save``
and ``--benchmark-compare`` do for timings.

``--offloadprobe-save=NAME`` writes ``.offloadprobe/NAME.json`` under pytest's rootdir
(a value with a folder in it or ending in ``.json`` is a path, from the working folder):
one entry per measured ``offload_budget`` test, its node id as ``test``, beside the run's
whole record as ``run --json`` writes it (``label``, ``payload_bytes``, ``summary``,
``cycles``, its verdict). ``--offloadprobe-compare=NAME|PATH`` holds each marked test to
the entry of the same test, by the CLI's rules (``--baseline-json`` with
``--max-increase``, ``core.regression``), at ``--offloadprobe-max-increase`` (5%): a
figure grown by more fails the test as ``regressed``; a test the file has no entry of is
an error, never a pass.

Under pytest-xdist each worker measures its tests; the entries travel to the controller
on the tests' reports, and the controller writes the file once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SAVE = "--offloadprobe-save"
COMPARE = "--offloadprobe-compare"
INCREASE = "--offloadprobe-max-increase"
FOLDER = ".offloadprobe"
KIND = "pytest"
ATTRIBUTE = "offloadprobe_record"
"""The test report's attribute that carries a measured test's entry (JSON text)."""


def resolve(value: str, rootdir: Path) -> Path:
    """A NAME under ``<rootdir>/.offloadprobe``; a value with a folder or ``.json``: a path."""
    if "/" in value or value.endswith(".json"):
        return Path(value)
    return rootdir / FOLDER / f"{value}.json"


def entry(test: str, row: Any) -> dict[str, Any]:
    """One measured test as the file keeps it: its node id and the row's judged record."""
    doc = row.report.to_dict()
    (run,) = doc["runs"]
    return {
        "test": test,
        **run,
        "device": doc["device"],
        "emulated": doc["emulated"],
        "model": doc["model"],
        "settings": doc["settings"],
    }


def document(entries: dict[str, dict[str, Any]], environment: dict[str, Any]) -> dict[str, Any]:
    """The saved file: the versions and machine of the session, every entry by node id."""
    from offloadprobe.core.records import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "versions": environment.get("versions") or {},
        "machine": environment.get("machine") or {},
        "runs": [entries[test] for test in sorted(entries)],
    }


_ENTRY = pytest.StashKey[str]()
"""A measured test's entry, until a report of the test carries it."""


@dataclass(slots=True)
class Storage:
    """What this session saves and what it compares against; registered as a plugin of
    its own when either option is given (its hooks carry and write the entries)."""

    save: Path | None = None
    compare: Any = None
    """The ``RegressionBudget`` of ``--offloadprobe-compare``, its rows by node id."""
    worker: bool = False
    """A pytest-xdist worker: it measures and carries, the controller keeps and writes."""
    saved: dict[str, dict[str, Any]] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    said: str | None = None

    @classmethod
    def from_options(
        cls,
        save: str | None,
        compare: str | None,
        limit: str,
        rootdir: Path,
        *,
        worker: bool = False,
    ) -> Storage:
        """Both options checked before any test runs (``UsageError``: one line)."""
        from offloadprobe.core.errors import UsageError
        from offloadprobe.core.regression import RegressionBudget, load_stored, parse_increase
        from offloadprobe.report.output import check_writable

        storage = cls(worker=worker)
        try:
            fraction = parse_increase(limit)
        except UsageError:
            raise UsageError(
                f"cannot parse {INCREASE} {limit!r}: give a percentage of the stored figure, "
                "e.g. 5%"
            ) from None
        if save is not None:
            storage.save = check_writable(resolve(save, rootdir), SAVE)
        if compare is not None:
            path = resolve(compare, rootdir)
            stored = load_stored(path, flag=COMPARE, key="test", writer=SAVE)
            storage.compare = RegressionBudget(
                path=path, limit=fraction, stored=stored, flag=COMPARE
            )
        return storage

    def gate(self, test: str) -> Any:
        """The budget holding ``test`` to its stored entry (None without a compare); an
        error naming the test and what the file has where it has no entry of it."""
        from dataclasses import replace

        from offloadprobe.core.errors import UsageError

        if self.compare is None:
            return None
        stored = self.compare.stored.get(test)
        if stored is None:
            have = sorted(self.compare.stored)
            shown = ", ".join(have[:3]) + (f" and {len(have) - 3} more" if len(have) > 3 else "")
            raise UsageError(
                f"{COMPARE} {self.compare.path} has no record of {test} (it has {shown}): "
                f"store one with {SAVE}"
            )
        return replace(self.compare, stored={stored.label: stored}, row=stored.label)

    def measured(self, item: pytest.Item, test: str, row: Any) -> None:
        """A marked test's row, kept for its report when this session saves it: a record
        with figures (a worker that stopped before any offload/load pair has none)."""
        run = row.run if row.outcome.report is not None else None
        if self.save is not None and run is not None and run.summary is not None:
            item.stash[_ENTRY] = carried(test, row)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        text = item.stash.get(_ENTRY, None)
        if text is not None:  # the first report after the measurement: the setup's
            setattr(report, ATTRIBUTE, text)
            del item.stash[_ENTRY]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        text = getattr(report, ATTRIBUTE, None)
        if text is None or self.worker:
            return
        found = json.loads(text)
        environment = found.pop("environment", {})
        self.environment = self.environment or environment
        self.saved[found["test"]] = found

    def pytest_sessionfinish(self) -> None:
        if not self.worker:
            self.said = self.write()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.said is not None:
            terminalreporter.write_line(self.said)

    def write(self) -> str | None:
        """The file, when this session saves; the line that says what it holds."""
        if self.save is None:
            return None
        if not self.saved:
            return f"offloadprobe: {SAVE}: no offload_budget test was measured, nothing written"
        doc = document(self.saved, self.environment)
        try:
            self.save.parent.mkdir(parents=True, exist_ok=True)
            self.save.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            return f"offloadprobe: cannot write {SAVE} {self.save}: {exc.strerror or exc}"
        return f"offloadprobe: saved {len(self.saved)} test records to {self.save}"


def carried(test: str, row: Any) -> str:
    """A measured test's entry as the text its report carries to the controller."""
    found = entry(test, row)
    found["environment"] = {"versions": row.report.versions, "machine": row.report.machine}
    return json.dumps(found)
