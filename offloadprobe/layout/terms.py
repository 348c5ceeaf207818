"""One line of checkable arithmetic, shared by layouts, projections and repro scaling."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Term:
    """One line of arithmetic a user can check: ``label``: ``formula`` = ``value``."""

    label: str
    formula: str
    value: int
    unit: str = "B"
    """``B`` for bytes; otherwise what is counted (``elements``, ``layers``)."""
