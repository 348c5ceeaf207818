"""What each tensor an engine holds is for: the roles every verdict rule reads.

An engine's built training state names every tensor it owns once, as a :class:`Holding`:
its owner in the engine's own words, its role, a key stable across a round trip, and the
tensor. The rules read roles; messages keep the owner's word.

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Role(str, Enum):  # noqa: UP042 (str and Enum, as SEAM.md has it)
    PARAMETERS = "parameters"  # what a model strategy must move (and restore bit-exact)
    GRADIENTS = "gradients"  # a model strategy frees (need not restore values)
    OPTIMIZER = "optimizer state"  # what an optimizer strategy must move (bit-exact)
    FROZEN = "frozen"  # frozen parameters (a model strategy moves them too)
    REFERENCE = "reference model"
    BATCH = "batch"  # stays on the device by design
    FRAMEWORK = "framework"  # stays on the device by design, NAMED by the engine


@dataclass(frozen=True, slots=True)
class Holding:
    owner: str  # the engine's own word: "sharded_param", "exp_avg", "param_data", ...
    role: Role
    key: str  # stable across a round trip: "blocks.3.mlp.up.weight/exp_avg"
    tensor: Any  # the live tensor (its storage may be freed after an offload)
