"""What ``offloadprobe repro`` found: one outcome per strategy, and the arithmetic behind it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from offloadprobe.core.records import SCHEMA_VERSION, NodeRecord
from offloadprobe.layout.terms import Term

Observed = Literal["oom", "ok", "error"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReproOutcome:
    """One strategy's scaled-down run, and whether it did what the scenario expects."""

    strategy: str
    kind: Literal["params", "optimizer"]
    expected: Literal["oom", "ok"]
    observed: Observed
    detail: str
    """``OOM reproduced: killed at cycle k, phase p ...`` or ``within limit, margin X``."""
    method: str
    """How the limit was enforced or judged (cgroup, VmHWM, --gpu-limit, CPU emulation)."""
    cycle: int | None = None
    phase: str | None = None
    margin: int | None = None
    """Bytes left under the limit (``ok`` runs)."""
    terms: tuple[Term, ...] = ()
    exit_code: int | None = None
    child_verdict: str = ""
    stderr_tail: str = ""
    node: NodeRecord | None = None
    """Node-level repros that ran through: the node row (its measured peak beside its
    ranks' own peaks)."""

    @property
    def matches(self) -> bool:
        return self.observed == self.expected


@dataclass(frozen=True, kw_only=True, slots=True)
class Repro:
    """A whole ``offloadprobe repro``: the scaling, the method, one outcome per strategy."""

    scenario: str
    path: str
    device: str
    emulated: bool
    model: dict[str, Any]
    scale: str
    """The scale factor and its operands, in words."""
    host_terms: tuple[Term, ...] = ()
    gpu_terms: tuple[Term, ...] = ()
    method: str = ""
    outcomes: list[ReproOutcome] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Outcomes this host was projected, before anything ran, not to reproduce, and why."""

    @property
    def mismatches(self) -> list[ReproOutcome]:
        return [o for o in self.outcomes if not o.matches]

    def to_dict(self) -> dict[str, Any]:
        doc = {"schema_version": SCHEMA_VERSION, "kind": "repro", **asdict(self)}
        for entry, outcome in zip(doc["outcomes"], self.outcomes, strict=True):
            entry["matches"] = outcome.matches
        return doc
