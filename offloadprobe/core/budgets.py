"""Memory and bandwidth budgets: small checks over a run's summary.

Each budget answers one question of a ``RunRecord`` and, when it is broken,
returns a ``Breach`` whose message reads like
``host peak 2.61x payload > limit 1.10x``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import RunRecord, RunSummary
from offloadprobe.core.residual import breaking, residuals
from offloadprobe.core.units import format_bytes, format_gbps, parse_size
from offloadprobe.core.world_records import NodeRecord


@dataclass(frozen=True, slots=True)
class Breach:
    """One broken budget of one run."""

    strategy: str
    """The row's full label, ``lazy + legacy``."""
    budget: str
    """The flag that set the budget, e.g. ``--max-host-peak``."""
    message: str
    kind: str = "over budget"
    """The verdict a row that broke it gets: ``over budget``, ``regressed`` (a figure grew
    over a stored run's), ``bad input`` (a stored run that cannot be compared)."""

    def line(self) -> str:
        return f"{self.strategy}: {self.budget}: {self.message}"


class Budget(Protocol):
    @property
    def flag(self) -> str: ...

    def check(self, run: RunRecord) -> Breach | None: ...


def _summary(run: RunRecord) -> RunSummary:
    """A budget holds a completed run (the verdict rules judge the others first)."""
    if run.summary is None:
        raise ValueError(f"{run.label}: no summary to hold to a budget")
    return run.summary


def host_peaks_x(run: RunRecord) -> list[tuple[str, float]]:
    """The host peaks a ratio budget holds: each part over its own bytes when both the
    parameters and the optimizer state moved, else the whole over the bytes moved.

    The whole is over the host RSS before the first offload, so with two parts it also
    carries what the framework's train steps left between cycles; the parts' ledger
    (``measure.summary``) does not.
    """
    s = _summary(run)
    parts = [("parameters", s.params), ("optimizer state", s.optimizer)]
    named = [(f" ({name})", part.host_peak_x) for name, part in parts if part is not None]
    return named if len(named) == 2 else [("", s.host_peak_x)]


@dataclass(frozen=True, slots=True)
class HostPeakBudget:
    """Worst host peak over the pre-offload baseline, as a multiple of the bytes moved
    (each part over its own bytes, and the whole) or as bytes."""

    limit_x: float | None = None
    limit_bytes: int | None = None
    flag: str = "--max-host-peak"

    def check(self, run: RunRecord) -> Breach | None:
        s = _summary(run)
        if self.limit_x is not None:
            for what, x in host_peaks_x(run):
                if x > self.limit_x:
                    msg = f"host peak{what} {x:.2f}x > {self.limit_x:.2f}x"
                    return Breach(run.label, self.flag, msg)
        if self.limit_bytes is not None and s.host_peak_bytes > self.limit_bytes:
            msg = f"host peak {format_bytes(s.host_peak_bytes)} > {format_bytes(self.limit_bytes)}"
            return Breach(run.label, self.flag, msg)
        return None

    def check_node(self, label: str, node: NodeRecord) -> Breach | None:
        """A node's measured peak (its memory cgroup's, over its usage at the first
        offload) against the limit times the bytes its ranks move (a ratio), or times its
        ranks (a size: each rank's share)."""
        if node.peak_bytes is None:
            return None
        who = f"node {node.node_rank}"
        if self.limit_x is not None and node.peak_x is not None and node.peak_x > self.limit_x:
            msg = (
                f"{who}: host peak {node.peak_x:.2f}x of the bytes its ranks move > "
                f"{self.limit_x:.2f}x"
            )
            return Breach(label, self.flag, msg)
        if self.limit_bytes is not None:
            limit = self.limit_bytes * len(node.ranks)
            if node.peak_bytes > limit:
                msg = (
                    f"{who}: host peak {format_bytes(node.peak_bytes)} > "
                    f"{format_bytes(limit)} ({len(node.ranks)} ranks x "
                    f"{format_bytes(self.limit_bytes)})"
                )
                return Breach(label, self.flag, msg)
        return None


def node_breaches(run: RunRecord, budgets: Iterable[Budget]) -> list[Breach]:
    """Every breach of a budget that holds a node as a whole (``check_node``) by a node of
    a run over several ranks."""
    if run.world is None:
        return []
    found = []
    for budget in budgets:
        check = getattr(budget, "check_node", None)
        if check is None:
            continue
        for node in run.world.nodes:
            breach = check(run.label, node)
            if breach is not None:
                found.append(breach)
    return found


@dataclass(frozen=True, slots=True)
class HostHeldBudget:
    """Host bytes a strategy keeps through the train phases (held after its loads), as a
    multiple of the bytes moved or as bytes."""

    limit_x: float | None = None
    limit_bytes: int | None = None
    flag: str = "--max-host-held"

    def check(self, run: RunRecord) -> Breach | None:
        s = _summary(run)
        held, x = s.held_while_training_bytes, s.held_while_training_x
        if held is None:
            return Breach(run.label, self.flag, "no load completed: nothing held to check")
        if self.limit_x is not None and x is not None and x > self.limit_x:
            return Breach(
                run.label, self.flag, f"held while training {x:.2f}x > {self.limit_x:.2f}x"
            )
        if self.limit_bytes is not None and held > self.limit_bytes:
            msg = f"held while training {format_bytes(held)} > {format_bytes(self.limit_bytes)}"
            return Breach(run.label, self.flag, msg)
        return None


@dataclass(frozen=True, slots=True)
class GpuResidualBudget:
    """Device bytes still held after each offload, less what that offload was not to move
    (``core.residual``: optimizer state under ``--optimizer-strategy none``)."""

    limit_bytes: int
    flag: str = "--max-gpu-residual"

    def check(self, run: RunRecord) -> Breach | None:
        if not residuals(run):
            msg = "no GPU reading and no residency audit in this run: cannot check"
            return Breach(run.label, self.flag, msg)
        over = breaking(run, self.limit_bytes)
        if over is not None:
            return Breach(run.label, self.flag, over.text(self.limit_bytes))
        return None


@dataclass(frozen=True, slots=True)
class OffloadBandwidthBudget:
    """Steady-state offload rate (decimal GB/s)."""

    min_gbps: float
    flag: str = "--min-offload-bandwidth"

    def check(self, run: RunRecord) -> Breach | None:
        rate = _summary(run).offload_gbps
        if rate is None or rate < self.min_gbps:
            msg = f"offload {format_gbps(rate)} < {format_gbps(self.min_gbps)}"
            return Breach(run.label, self.flag, msg)
        return None


_RATIO = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*[xX×]\s*$")


def ratio_or_size(
    text: str, flag: str, allow_zero: bool = False
) -> tuple[float | None, int | None]:
    """``1.1x`` (a multiple of the bytes moved) or ``6GiB`` (a size): every verb's grammar
    of a budget that takes either (``attach``'s per-call budgets too)."""
    match = _RATIO.match(text)
    if match:
        return float(match.group(1)), None
    if re.match(r"^\s*[0-9]*\.?[0-9]+\s*$", text) and not (allow_zero and float(text) == 0):
        raise UsageError(
            f"{flag} {text!r} has no unit: write {text.strip()}x for a multiple of "
            f"the bytes moved or {text.strip()}GiB for a size"
        )
    try:
        return None, parse_size(text, what=flag, allow_zero=allow_zero)
    except UsageError:
        raise UsageError(
            f"cannot parse {flag} {text!r}: give a multiple of the bytes moved like 1.1x "
            "or a size like 6GiB"
        ) from None


def parse_host_peak(text: str) -> HostPeakBudget:
    """``1.1x`` (a multiple of the payload) or ``6GiB`` (absolute)."""
    limit_x, limit_bytes = ratio_or_size(text, "--max-host-peak")
    return HostPeakBudget(limit_x=limit_x, limit_bytes=limit_bytes)


def parse_host_held(text: str) -> HostHeldBudget:
    """``0.05x`` (a multiple of the bytes moved) or ``1GiB`` (absolute; ``0`` for none)."""
    limit_x, limit_bytes = ratio_or_size(text, "--max-host-held", allow_zero=True)
    return HostHeldBudget(limit_x=limit_x, limit_bytes=limit_bytes)


def parse_bandwidth(text: str) -> OffloadBandwidthBudget:
    """``20`` or ``20GB/s``: decimal gigabytes per second."""
    match = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*(GB/s|GBps|gbps)?\s*$", text)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(
            f"cannot parse --min-offload-bandwidth {text!r}: give decimal GB/s like 20 or 20GB/s"
        )
    return OffloadBandwidthBudget(min_gbps=float(match.group(1)))


def check_all(budgets: list[Budget], runs: list[RunRecord]) -> list[Breach]:
    """Every breach of every budget by every run, in run order."""
    checked = [run for run in runs if run.summary is not None]
    return [b for run in checked for budget in budgets if (b := budget.check(run)) is not None]
