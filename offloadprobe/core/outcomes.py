"""A row's outcome: the verdict kinds, a verdict, and the one failure record.

Judged by the pure rules of ``core.verdicts``; rendered by every reporter.
"""

from __future__ import annotations

from dataclasses import dataclass

VERDICT_KINDS = (
    "ok",
    "over budget",
    "over limit",
    "regressed",
    "corrupted",
    "not offloaded",
    "partly offloaded",
    "out of memory",
    "killed",
    "exited early",
    "crashed",
    "timed out",
    "inconsistent",
    "escaped",
    "interrupted",
    "bad input",
    "unexpected pass",
    "not measured",
)
"""Every outcome a row can have; only ``ok`` exits 0, ``bad input`` exits 2, the rest 1
(a canary row's expected failure exits 0 too, ``Verdict.expected``). ``over limit``: a
host peak over the host limit the worker ran under, killed or not. ``regressed``: a
figure grew over a stored run's (``--baseline-json``); ``unexpected pass``: a row expected
to fail (``compare --expect``) passed every check. ``not measured``: ``attach`` could
not measure a phase it was told to (not found, not wrapped, never imported; never called
or a process uninstrumented under ``--require-calls``), or was told of none."""


def where_text(cycle: int | None, phase: str | None) -> str:
    parts = []
    if cycle is not None:
        parts.append(f"cycle {cycle}")
    if phase is not None:
        parts.append(f"phase {phase}")
    return ", ".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """One row's outcome: its kind, what broke, and where (phase and cycle) when known."""

    kind: str
    detail: str = ""
    cycle: int | None = None
    phase: str | None = None
    reasons: tuple[str, ...] = ()
    """Every finding behind the verdict, one line each (``detail`` joins or leads them)."""
    expected: bool = False
    """A canary row: the verdict is the one the user said to expect (exit 0)."""

    def __post_init__(self) -> None:
        if self.kind not in VERDICT_KINDS:
            raise ValueError(f"unknown verdict kind {self.kind!r}")

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def passes(self) -> bool:
        """Whether the row keeps the exit code at 0: ok, or the failure it was expected to be."""
        return self.ok or self.expected

    @property
    def exit_code(self) -> int:
        if self.passes:
            return 0
        return 2 if self.kind == "bad input" else 1

    @property
    def where(self) -> str:
        """``cycle 1, phase offload`` (empty when not tied to a phase)."""
        return where_text(self.cycle, self.phase)

    def line(self) -> str:
        """``over budget: host peak 4.20x > 1.70x``: the kind, then the detail."""
        detail = self.detail
        if self.where and self.where not in detail:
            detail = f"{detail} ({self.where})" if detail else self.where
        text = f"{self.kind}: {detail}" if detail else self.kind
        return f"{text} (as expected)" if self.expected and not self.ok else text


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """Why and where a run or a measured process stopped: the one failure record."""

    kind: str
    """A ``VERDICT_KINDS`` entry: ``out of memory``, ``crashed``, ``killed``, ``exited
    early``, ``timed out``, ``inconsistent``, ``bad input``..."""
    message: str
    cycle: int | None = None
    phase: str | None = None
    exit_code: int | None = None
    """The measured process's exit status when it ended (negative: killed by that signal)."""

    @property
    def where(self) -> str:
        """``cycle 0, phase offload`` or empty."""
        return where_text(self.cycle, self.phase)

    @property
    def text(self) -> str:
        """The message with where it happened: ``CUDA out of memory (cycle 0, phase load)``."""
        return f"{self.message} ({self.where})" if self.where else self.message

    @property
    def verdict(self) -> Verdict:
        return Verdict(kind=self.kind, detail=self.message, cycle=self.cycle, phase=self.phase)


__all__ = ["VERDICT_KINDS", "Failure", "Verdict", "where_text"]
