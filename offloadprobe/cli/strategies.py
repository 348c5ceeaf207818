"""Strategy names on the command line: help texts that list every one, and row labels."""

from __future__ import annotations

from offloadprobe.core.errors import UsageError
from offloadprobe.core.registry import is_user_spec


def model_help() -> str:
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    return (
        f"Parameter offload strategy: {MODEL_STRATEGIES.choices()}. Prefix a name to label "
        "the row: mine=mypkg.offload:offload,load."
    )


def optimizer_help() -> str:
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES

    return f"Optimizer-state offload strategy: {OPTIMIZER_STRATEGIES.choices()}."


def split_label(spec: str) -> tuple[str | None, str]:
    """``name=spec`` names a row ``name``; a plain spec has no label of its own."""
    head, sep, tail = spec.partition("=")
    if not sep or "(" in head or ":" in head:  # keyword arguments of a function pair
        return None, spec
    name = head.strip()
    if not name or not tail.strip():
        raise UsageError(f"--strategy {spec!r}: give name=strategy, e.g. fixed=mymod:offload,load")
    if is_user_spec(name):
        raise UsageError(f"--strategy {spec!r}: a row's name has no colon")
    return name, tail.strip()
