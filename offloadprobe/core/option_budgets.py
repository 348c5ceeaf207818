"""The budget options among a verb's option values: validated up front, and the words
the user gave them in (``--max-host-peak 1.5x``), for the verdicts that quote them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.core.options import BUDGET_NAMES, BY_NAME


@dataclass(frozen=True, kw_only=True, slots=True)
class Parsed:
    """What a verb's option values say beyond the configuration."""

    budgets: list[Any] = field(default_factory=list)
    budget_words: list[str] = field(default_factory=list)


def budgets(values: Mapping[str, Any], rename: Callable[[str], str] | None = None) -> Parsed:
    """The budgets among ``values`` (validated up front) and how they were given."""
    from offloadprobe.core.budgets import budgets_from_flags

    given = {name: values.get(name) for name in BUDGET_NAMES}
    words = [
        f"{(rename or (lambda f: f))(BY_NAME[n].cli_flag)} {v}"
        for n, v in given.items()
        if v is not None
    ]
    return Parsed(budgets=budgets_from_flags(**given), budget_words=words)
