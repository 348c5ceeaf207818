"""Shared end of `run` and `compare`: print budget breaches, fail with exit code 1."""

from __future__ import annotations

import sys

from offloadprobe.core.budgets import Budget, check_all
from offloadprobe.core.errors import BudgetExceeded
from offloadprobe.core.records import RunRecord


def enforce(budgets: list[Budget], runs: list[RunRecord]) -> None:
    """One line per breach on stderr, then ``BudgetExceeded`` (exit 1) if any."""
    breaches = check_all(budgets, runs)
    for breach in breaches:
        print(f"budget exceeded: {breach.line()}", file=sys.stderr)
    if breaches:
        raise BudgetExceeded(f"{len(breaches)} budget(s) exceeded")
