"""The budget options among a verb's option values: validated up front, and the words
the user gave them in (``--max-host-peak 1.5x``), for the verdicts that quote them. The
budgets are ``core.budgets``', the regression gate against a stored run
``core.regression``'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.core.budgets import (
    Budget,
    GpuResidualBudget,
    parse_bandwidth,
    parse_host_held,
    parse_host_peak,
)
from offloadprobe.core.options import BUDGET_NAMES, BY_NAME
from offloadprobe.core.regression import regression_budget
from offloadprobe.core.units import parse_size


@dataclass(frozen=True, kw_only=True, slots=True)
class Parsed:
    """What a verb's option values say beyond the configuration."""

    budgets: list[Any] = field(default_factory=list)
    budget_words: list[str] = field(default_factory=list)


def budgets(values: Mapping[str, Any], rename: Callable[[str], str] | None = None) -> Parsed:
    """The budgets among ``values`` (validated up front) and how they were given."""
    given = {name: values.get(name) for name in BUDGET_NAMES}
    words = [
        f"{(rename or (lambda f: f))(BY_NAME[n].cli_flag)} {v}"
        for n, v in given.items()
        if v is not None
    ]
    return Parsed(budgets=budgets_from_flags(**given), budget_words=words)


def budgets_from_flags(
    max_host_peak: str | None,
    max_gpu_residual: str | None,
    min_offload_bandwidth: str | None,
    max_host_held: str | None = None,
    *,
    baseline_json: str | None = None,
    max_increase: str | None = None,
) -> list[Budget]:
    """The budgets a command line sets (validated up front, before anything runs)."""
    found: list[Budget] = []
    if max_host_peak is not None:
        found.append(parse_host_peak(max_host_peak))
    if max_gpu_residual is not None:
        found.append(
            GpuResidualBudget(
                parse_size(max_gpu_residual, what="--max-gpu-residual", allow_zero=True)
            )
        )
    if min_offload_bandwidth is not None:
        found.append(parse_bandwidth(min_offload_bandwidth))
    if max_host_held is not None:
        found.append(parse_host_held(max_host_held))
    if baseline_json is not None or max_increase is not None:
        # last: a broken budget names the verdict before a regression does
        found.append(regression_budget(baseline_json, max_increase))
    return found
