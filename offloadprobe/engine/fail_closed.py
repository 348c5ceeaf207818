"""Fail closed: a strategy against a training state that holds nothing it could move.

A model strategy that moves parameters, run against an inventory with no parameter bytes
(``Role.PARAMETERS``), or an optimizer strategy that moves state, run against one with no
optimizer state (``Role.OPTIMIZER``) and no parameter its optimizer could make state for,
would pass every check it could not fail: nothing to leave on the device, nothing to
corrupt. (State an optimizer makes in its first step, as Adam's moments and a
precision-aware optimizer's master weights are, is not there at the build; the residency
rules judge it at each offload: ``optimizer state X: none of it left the device``.)
Either is bad input (exit 2), raised as soon as the state is built, before any strategy
code runs (a registered strategy's descriptor says whether it moves; a user's function
pair always does).

Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.registry import is_user_spec
from offloadprobe.core.roles import Role
from offloadprobe.engine.engine_state import inventory_of, role_bytes


def moves_params(spec: str) -> bool:
    """Whether the model strategy ``spec`` moves parameters (a user's pair does), read from
    its descriptor without importing a user's module."""
    if is_user_spec(spec):
        return True
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    return bool(MODEL_STRATEGIES.get(spec).moves_params)


def _optimized(state: Any) -> bool:
    """Whether the state's optimizer has parameters to make state for."""
    groups = getattr(state, "optimizer_groups", None)
    found = groups() if groups is not None else []
    return any(group.get("params") for each in found for group in each)


def check_holdings(cfg: Any, state: Any, *, moves_optimizer: bool) -> None:
    """Raise :class:`UsageError` (one line) where a strategy has nothing to move."""
    holdings = inventory_of(state)
    if moves_params(cfg.strategy) and not role_bytes(holdings, Role.PARAMETERS):
        raise UsageError(
            f"--strategy {cfg.strategy} moves parameters, but the training state holds no "
            "parameter bytes it could move: choose --strategy none or an engine whose "
            "inventory names its parameters"
        )
    if moves_optimizer and not role_bytes(holdings, Role.OPTIMIZER) and not _optimized(state):
        raise UsageError(
            f"--optimizer-strategy {cfg.optimizer_strategy} moves optimizer state, but the "
            "training state holds none: choose --optimizer-strategy none or an engine "
            "whose optimizer keeps its state"
        )
