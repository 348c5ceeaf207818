"""The role of each tensor a training engine owns, and one entry of its inventory.

Rules read roles, never an engine's words: "not offloaded" is about the parameters,
whatever the engine calls them (``param_data``, ``sharded_param``); a message keeps the
engine's own word (the holding's ``owner``). Device bytes no holding names are never the
framework's: only what an engine names :attr:`Role.FRAMEWORK` stays there by design.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    PARAMETERS = "parameters"
    """What a model strategy must move, and restore bit for bit."""
    GRADIENTS = "gradients"
    """What a model strategy frees (its values need not come back)."""
    OPTIMIZER = "optimizer state"
    """What an optimizer strategy must move, and restore bit for bit."""
    FROZEN = "frozen"
    """Frozen parameters: a model strategy moves them too."""
    REFERENCE = "reference model"
    """A reference model's parameters: a model strategy moves them too."""
    BATCH = "batch"
    """The batch: stays on the device by design."""
    FRAMEWORK = "framework"
    """The engine's own device state, named by it: stays on the device by design."""


MOVED_BY_MODEL_STRATEGY = frozenset({Role.PARAMETERS, Role.GRADIENTS, Role.FROZEN, Role.REFERENCE})
STAYS = frozenset({Role.BATCH, Role.FRAMEWORK})


@dataclass(frozen=True, slots=True)
class Holding:
    """One tensor an engine owns: its owner's word, its role, a key stable across a round
    trip (``blocks.3.mlp.up.weight/exp_avg``) and the live tensor (its storage may be
    freed after an offload)."""

    owner: str
    role: Role
    key: str
    tensor: Any


__all__ = ["MOVED_BY_MODEL_STRATEGY", "STAYS", "Holding", "Role"]
