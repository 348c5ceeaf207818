"""What each tensor an engine owns is for, as the harness reads it (torch-free).

An engine's built training state names every tensor it owns, each once, as a
:class:`Holding`; the audit, the ledger, the integrity check (a bit-exact round trip by
key), the reference check and the residency verdicts read only that inventory. Device
bytes no holding names are never the framework's: they are device memory no part owns.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Role(str, Enum):  # noqa: UP042 (the seam's spelling)
    PARAMETERS = "parameters"
    """What a model strategy must move (and restore bit-exact)."""
    GRADIENTS = "gradients"
    """What a model strategy frees (its values need not be restored)."""
    OPTIMIZER = "optimizer state"
    """What an optimizer strategy must move (bit-exact)."""
    FROZEN = "frozen"
    """Frozen parameters (a model strategy moves them too)."""
    REFERENCE = "reference model"
    BATCH = "batch"
    """Stays on the device by design."""
    FRAMEWORK = "framework"
    """Stays on the device by design, named by the engine."""


@dataclass(frozen=True, slots=True)
class Holding:
    owner: str
    """The engine's own word: ``"sharded_param"``, ``"exp_avg"``, ``"param_data"``..."""
    role: Role
    key: str
    """Stable across a round trip: ``"blocks.3.mlp.up.weight/exp_avg"``."""
    tensor: Any
    """The live tensor (its storage may be freed after an offload)."""
