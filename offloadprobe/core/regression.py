"""Regression against a stored run: each row's figures over the same row's in a saved JSON.

``--baseline-json PATH --max-increase 5%`` (and the plugin's ``baseline_json=`` and
``max_increase=``) hold every row to the record of the same label in a result ``run`` or
``compare`` wrote before (``--json``). A row regresses when its host peak, steady host,
pinned or GPU-left bytes grew by more than the limit over the stored figure; the breach
names both figures and the change, as in
``host peak 35.31 MiB vs 32.10 MiB stored (+10.0% > +5.0%)``.

A stored figure at or below zero (nothing left on the device) has no percentage to grow
by: there the growth is taken over the row's payload instead. A figure one side did not
measure (pinned memory in CPU emulation) is not compared.

Everything about the stored file is checked before anything runs, each an exit 2 with one
line: that it is a result (rows with labels), that every measured row has a payload and
finite figures below 2**63 bytes, at least one of them (``load_stored``), and that the
model this run will measure has the payload of the stored row it is held to
(``check_payloads``, given the payload each row will move: the CLI and the plugin compute
it from the flags without building anything; the plugin's ``baseline_row=`` and
``--offloadprobe-compare`` records too, before the test's worker starts).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from offloadprobe.core.budgets import Breach
from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import RunRecord
from offloadprobe.core.units import format_bytes

FLAG = "--max-increase"
FIGURES = ("host peak", "steady host", "pinned", "GPU left")
"""The figures a stored run holds a row to, in the order a breach names them."""
PAYLOAD_TOLERANCE = 0.01
"""A stored row whose payload differs by more than this fraction measured another model."""
MOST_BYTES = 2**63
"""No figure of bytes reaches this (a signed 64-bit count): a stored one that does would
gate nothing (``1e300`` never grows by 5%)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Stored:
    """One row of the stored result: its payload and its figures by name (None: not
    measured there)."""

    label: str
    payload_bytes: int
    figures: dict[str, int | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One figure of one row: the stored bytes, this run's, and how much it grew."""

    figure: str
    stored_bytes: int
    bytes: int
    payload_bytes: int

    @property
    def over_payload(self) -> bool:
        """Whether the growth is taken over the payload (a stored figure at or below 0)."""
        return self.stored_bytes <= 0

    @property
    def increase(self) -> float:
        """The growth as a fraction of the stored figure (or of the payload, see above)."""
        base = self.payload_bytes if self.over_payload else self.stored_bytes
        return (self.bytes - self.stored_bytes) / max(base, 1)

    def exceeds(self, limit: float) -> bool:
        return self.increase > limit

    def text(self, limit: float) -> str:
        of = " of the payload" if self.over_payload else ""
        return (
            f"{self.figure} {format_bytes(self.bytes)} vs {format_bytes(self.stored_bytes)} "
            f"stored ({self.increase:+.1%}{of} > +{limit:.1%})"
        )


def _figures(summary: Mapping[str, Any]) -> dict[str, int | None]:
    left = summary.get("gpu_left_after_offload_bytes")
    audited = summary.get("left_after_offload_bytes_by_key")
    if left is None and audited is not None:
        left = sum(audited.values())  # CPU emulation: what the residency audit found
    return {
        "host peak": summary.get("host_peak_bytes"),
        "steady host": summary.get("steady_host_bytes"),
        "pinned": summary.get("pinned_reserved_bytes"),
        "GPU left": left,
    }


def figures_of(run: RunRecord) -> dict[str, int | None]:
    """A measured row's figures by name (empty without a summary)."""
    if run.summary is None:
        return {}
    from dataclasses import asdict

    return _figures(asdict(run.summary))


def load_stored(
    path: Path, *, flag: str = "--baseline-json", key: str = "label", writer: str = ""
) -> dict[str, Stored]:
    """Every row of a saved result that has figures, by ``key``: its ``label`` (a result
    ``run`` or ``compare`` wrote), or its ``test`` (a file ``--offloadprobe-save`` wrote).
    ``writer`` names what writes such a file, for the line that says it is not one."""
    writer = writer or "run or compare --json"
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{flag} {path} is not JSON ({exc}): give a file {writer} wrote") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        raise UsageError(f"{flag} {path} has no rows: give a file {writer} wrote")
    stored = {}
    for entry in runs:
        summary = entry.get("summary") if isinstance(entry, dict) else None
        if not isinstance(summary, dict) or not entry.get("label") or not entry.get(key):
            continue  # a row that failed before it measured anything holds nothing
        row = _stored_row(path, str(entry["label"]), entry.get("payload_bytes"), summary, flag)
        stored[str(entry[key])] = row
    if not stored:
        raise UsageError(f"{flag} {path} has no row with figures to compare against")
    return stored


_KEYS = {
    "host peak": "summary.host_peak_bytes",
    "steady host": "summary.steady_host_bytes",
    "pinned": "summary.pinned_reserved_bytes",
    "GPU left": "summary.gpu_left_after_offload_bytes",
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bytes(value: Any) -> bool:
    return _number(value) and math.isfinite(value) and abs(value) < MOST_BYTES


def _stored_row(
    path: Path, label: str, payload: Any, summary: Mapping[str, Any], flag: str = "--baseline-json"
) -> Stored:
    """One measured row of the stored file, or exit 2 naming the row and what is wrong
    with it: a payload to compare models by, finite figures, at least one of them."""
    where = f"{flag} {path}: row {label!r}"
    again = "store it again with run or compare --json"
    if payload is None:
        raise UsageError(f"{where} has no payload_bytes, so its model cannot be matched: {again}")
    if not _bytes(payload) or payload <= 0:
        raise UsageError(f"{where} has payload_bytes {payload!r}, not a size in bytes: {again}")
    audited = summary.get("left_after_offload_bytes_by_key")
    if audited is not None and not (
        isinstance(audited, dict) and all(_number(v) for v in audited.values())
    ):
        raise UsageError(
            f"{where}: summary.left_after_offload_bytes_by_key is {audited!r}, not bytes by "
            f"key: {again}"
        )
    figures = _figures(summary)
    for name, value in figures.items():
        if value is not None and not _bytes(value):
            raise UsageError(
                f"{where}: its {name} ({_KEYS[name]}) is {value!r}, not a number of bytes (the "
                f"file was edited or written by another tool): {again}"
            )
    if all(value is None for value in figures.values()):
        raise UsageError(
            f"{where} has none of {', '.join(FIGURES)} (every one null), so it would gate "
            f"nothing: {again}, from a run that measured"
        )
    return Stored(
        label=label,
        payload_bytes=int(payload),
        figures={k: None if v is None else int(v) for k, v in figures.items()},
    )


def parse_increase(text: str) -> float:
    """``5%`` (or ``5 %``, ``0.5%``) as a fraction."""
    match = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$", str(text))
    if not match:
        raise UsageError(
            f"cannot parse {FLAG} {text!r}: give a percentage of the stored figure, e.g. 5%"
        )
    return float(match.group(1)) / 100


def changes(stored: Stored, run: RunRecord) -> list[Change]:
    """Every figure both the stored row and this run measured."""
    now = figures_of(run)
    return [
        Change(
            figure=name,
            stored_bytes=int(before),
            bytes=int(after),
            payload_bytes=run.payload_bytes,
        )
        for name in FIGURES
        if (before := stored.figures.get(name)) is not None and (after := now.get(name)) is not None
    ]


@dataclass(frozen=True, slots=True)
class RegressionBudget:
    """Each row's figures over the stored row of the same label, by at most ``limit``."""

    path: Path
    limit: float
    stored: Mapping[str, Stored]
    flag: str = FLAG
    row: str | None = None
    """The stored row every run is held to (the plugin's ``baseline_row=``, a test's own
    stored record); None: the row of the run's own label."""

    def check(self, run: RunRecord) -> Breach | None:
        stored = self.stored.get(self.row or run.label)
        if stored is None or run.summary is None:
            return None
        if stored.payload_bytes and run.payload_bytes:
            apart = abs(run.payload_bytes - stored.payload_bytes) / stored.payload_bytes
            if apart > PAYLOAD_TOLERANCE:
                message = (
                    f"{self.path} measured {run.label} at a payload of "
                    f"{format_bytes(stored.payload_bytes)}, this run at "
                    f"{format_bytes(run.payload_bytes)}: store a run of the same model"
                )
                return Breach(run.label, self.flag, message, kind="bad input")
        grown = [c for c in changes(stored, run) if c.exceeds(self.limit)]
        if not grown:
            return None
        message = "; ".join(c.text(self.limit) for c in grown)
        return Breach(run.label, self.flag, message, kind="regressed")

    def unmatched(self, labels: Iterable[str]) -> list[str]:
        """The labels the stored result has no row of (they are not compared)."""
        return [label for label in labels if label not in self.stored]

    def held_to(self, row: str, *, what: str = "baseline_json=") -> RegressionBudget:
        """This budget holding every run to the stored ``row``; bad input (one line naming
        the row and the rows the file has) where the file has no such row."""
        if row not in self.stored:
            have = ", ".join(sorted(self.stored))
            raise UsageError(f"{what} {self.path} has no row {row!r} (it has: {have})")
        return replace(self, row=row)


def regression_budget(baseline_json: str | None, max_increase: str | None) -> RegressionBudget:
    """The budget both flags give (each needs the other), read and checked up front."""
    if baseline_json is None:
        raise UsageError(f"{FLAG} needs --baseline-json PATH: the result to compare against")
    if max_increase is None:
        raise UsageError(
            f"--baseline-json needs {FLAG} too: how much a figure may grow, e.g. {FLAG} 5%"
        )
    path = Path(baseline_json)
    return RegressionBudget(path=path, limit=parse_increase(max_increase), stored=load_stored(path))


def regression_of(budgets: Iterable[Any]) -> RegressionBudget | None:
    return next((b for b in budgets if isinstance(b, RegressionBudget)), None)


def check_rows(budgets: Iterable[Any], labels: list[str]) -> list[str]:
    """Before anything runs: exit 2 when the stored result has none of the rows (another
    file, or rows renamed); else one line per row that has no stored record."""
    budget = regression_of(budgets)
    if budget is None:
        return []
    missing = budget.unmatched(labels)
    if missing and len(missing) == len(labels):
        have = ", ".join(sorted(budget.stored))
        raise UsageError(
            f"--baseline-json {budget.path} has no row of {', '.join(labels)} (it has: {have}); "
            "name the rows as they were stored"
        )
    return [
        f"--baseline-json {budget.path} has no row {label!r}: that row is not compared"
        for label in missing
    ]


def check_payloads(budgets: Iterable[Any], payloads: Mapping[str, int | None]) -> None:
    """Before anything runs: exit 2 when a stored row measured another model than the one
    this run will measure (``payloads``: each row's label and the ``param_data`` bytes it
    will move; None where that is not known up front, judged after the row ran). Every
    regression gate is checked, by the row it holds each run to (``baseline_row=``, a
    test's own stored record) or else the row of the run's label."""
    for budget in budgets:
        if not isinstance(budget, RegressionBudget):
            continue
        given = "--baseline-json" if budget.flag == FLAG else budget.flag
        for label, payload in payloads.items():
            stored = budget.stored.get(budget.row or label)
            if stored is None or not payload:
                continue
            apart = abs(payload - stored.payload_bytes) / stored.payload_bytes
            if apart > PAYLOAD_TOLERANCE:
                raise UsageError(
                    f"{given} {budget.path} measured {stored.label} at a payload of "
                    f"{format_bytes(stored.payload_bytes)}, and this run's model moves "
                    f"{format_bytes(payload)}: give the model flags the stored run had (its "
                    "payload_bytes), or store a run of this model"
                )
