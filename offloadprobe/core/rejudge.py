"""A saved row judged again from its facts, by the rules the verb judged it by.

``show`` never prints a stored outcome on trust: each row's record (its integrity lines,
residency facts, failure, host limit, summary) goes through ``core.verdicts.judge`` again,
held to the budgets the document says it was held to (``budgets``: the flags as the user
gave them, ``--max-host-peak 1.5x``), and a canary row to what it expected. Where the
stored outcome and the facts' verdict differ, the row shows the facts' verdict and
``disagreement`` says so in one line.

Two verdicts come from an input the record does not hold: the regression gate's
``regressed`` and ``bad input`` (a stored ``--baseline-json`` file, which may have changed
or gone since). Those are kept as stored where the facts alone pass; they can only make a
row stricter. Every other stored outcome must be the facts' own.

A fact that no offloadprobe writer puts in a record (a NaN or an infinite figure) is bad
input: one line naming the row and the key (``check_finite``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from offloadprobe.core.budgets import Breach, Budget
from offloadprobe.core.errors import UsageError
from offloadprobe.core.outcomes import Verdict
from offloadprobe.core.records import RunRecord
from offloadprobe.core.verdicts import expecting, judge

OUTSIDE = ("regressed", "bad input")
"""Verdicts a budget over another file gives (``core.regression``): kept as stored."""
OUTSIDE_FLAGS = ("--baseline-json", "--max-increase")
"""The regression gate's flags: the stored file they name is not re-read."""
FREE = ("loss",)
"""Figures that may be NaN in an honest record (a train step's loss that diverged)."""


def budgets_of(words: Iterable[str], *, where: str) -> list[Budget]:
    """The budgets a document's ``budgets`` names (``--max-host-peak 1.5x``), parsed by the
    verbs' own parsers; the regression gate's flags are left out (see above). A word
    that is no budget flag, or a value its flag refuses: bad input, one line."""
    from offloadprobe.core.option_budgets import budgets_from_flags
    from offloadprobe.core.options import BUDGET_NAMES, BY_NAME

    by_flag = {BY_NAME[name].cli_flag: name for name in BUDGET_NAMES}
    given: dict[str, str | None] = dict.fromkeys(BUDGET_NAMES)
    for word in words:
        flag, _, value = str(word).strip().partition(" ")
        if flag in OUTSIDE_FLAGS:
            continue
        if flag not in by_flag or not value.strip():
            raise UsageError(
                f"{where}: budget {word!r} is not one offloadprobe sets (it has "
                f"{', '.join(sorted(by_flag))} and a value): give a file a verb's --json wrote"
            )
        given[by_flag[flag]] = value.strip()
    kept = {k: v for k, v in given.items() if k not in ("baseline_json", "max_increase")}
    try:
        return budgets_from_flags(**kept)
    except UsageError as exc:
        raise UsageError(f"{where}: its budgets: {exc}") from None


def check_finite(entry: Any, *, where: str) -> None:
    """Bad input where a row's JSON holds a NaN or an infinite number outside ``FREE``."""
    for key, value in _numbers(entry, ""):
        if not math.isfinite(value):
            raise UsageError(
                f"{where}: {key} is {value!r}, a figure no offloadprobe record holds (the "
                "file was edited or written by another tool): give a file a verb's --json wrote"
            )


def _numbers(value: Any, key: str) -> Iterable[tuple[str, float]]:
    if isinstance(value, float):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if str(k) not in FREE:
                yield from _numbers(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{key}[{i}]")


def rejudge(
    run: RunRecord | None,
    budgets: Sequence[Budget],
    *,
    stored: Verdict | None,
    expect: str | None = None,
    where: str = "",
) -> tuple[Verdict, list[Breach]]:
    """The row's verdict from its facts (and the budgets it breaks); the stored one where
    it is a regression gate's and the facts alone pass (``OUTSIDE``)."""
    if run is None and stored is not None and not stored.passes:
        return stored, []  # a row without a record: nothing to judge it by, and it failed
    try:
        verdict, breaches = judge(run, list(budgets))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageError(
            f"{where}: its facts cannot be judged ({exc}): give a file a verb's --json wrote"
        ) from None
    if verdict.ok and stored is not None and stored.kind in OUTSIDE:
        return stored, breaches
    return expecting(verdict, expect), breaches


def disagreement(where: str, stored: Verdict | None, judged: Verdict) -> str | None:
    """One line where the stored outcome is not the facts' verdict (None where it is, or
    where the row stored none)."""
    if stored is None or (stored.kind, stored.expected) == (judged.kind, judged.expected):
        return None
    return (
        f"{where}: its stored outcome {stored.line()!r} is not what its facts judge, "
        f"{judged.line()!r}: shown as judged (the record was changed after it was written)"
    )
