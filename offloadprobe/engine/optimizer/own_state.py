"""What the optimizer holds itself: its state and groups as it made them.

Under ``--optimizer-strategy none`` optimizer state stays on the device by design, so a
tensor counts as optimizer state only where the optimizer made it, never because it hangs
off the optimizer (a copy of the parameters under a new state key, in a main parameter's
``decoupled_grad``, under a key the optimizer uses but larger than it made it). Each
tensor :func:`~offloadprobe.engine.optimizer.holdings.holdings` reaches is named by where
it hangs (its owner, the parameter it belongs to, its place among that pair's leaves) and
is the optimizer's own when that place was recorded, as the optimizer made it:

- after the model's build, before any strategy module is imported (the
  DistributedOptimizer's fp32 groups);
- during a train phase, where the optimizer's step makes its state (Adam's moments, its
  master weights, the main parameters' grads), each at its size then.

A place that appeared while the strategies were built, or during any offload or load, is
never the optimizer's. Own tensors count up to the bytes recorded for their place; a
tensor larger than that is not the optimizer's. What is not the optimizer's is, for the
residency audit and the device ledger, a tensor no part owns.

Limit: code a strategy runs inside a train step (a hook it installed on the model or the
optimizer) can add a place there as the optimizer's step does.

Torch-free at import.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from offloadprobe.engine.optimizer.holdings import Held, holdings

Place = tuple[str, int, int]
"""``(owner, id of the parameter it belongs to, index among that pair's tensors)``."""


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def places(optimizer: Any) -> dict[Place, Held]:
    """Every tensor the optimizer holds, by its place."""
    found: dict[Place, Held] = {}
    counts: dict[tuple[str, int], int] = {}
    for held in holdings([optimizer]):
        pair = (held.owner, id(held.param) if held.param is not None else 0)
        index = counts.get(pair, 0)
        counts[pair] = index + 1
        found[(*pair, index)] = held
    return found


class OwnState:
    """The places the optimizer made and their sizes then (see the module)."""

    def __init__(self) -> None:
        self.sizes: dict[Place, int] = {}
        self.foreign: set[Place] = set()
        """Places that appeared outside the optimizer's build and its steps."""
        self.recorded = False

    def record(self, optimizer: Any) -> None:
        """After the model's build, before any strategy module is imported."""
        self.sizes = {p: _nbytes(h.tensor) for p, h in places(optimizer).items()}
        self.recorded = True

    def note_foreign(self, optimizer: Any) -> None:
        """After the strategies were built, or after a phase that is not a train phase."""
        self.foreign |= places(optimizer).keys() - self.sizes.keys()

    def before_train(self, optimizer: Any) -> set[Place]:
        """The places there are as a train phase starts (what was there is not its)."""
        self.note_foreign(optimizer)
        return set(places(optimizer))

    def after_train(self, optimizer: Any, before: set[Place]) -> None:
        """The places a train phase made: the optimizer's step's, at their size now."""
        for place, held in places(optimizer).items():
            if place not in before and place not in self.sizes and place not in self.foreign:
                self.sizes[place] = _nbytes(held.tensor)

    def is_own(self, place: Place, held: Held) -> bool:
        if not self.recorded:  # nothing recorded: every holding counts, as before
            return True
        size = self.sizes.get(place)
        return size is not None and _nbytes(held.tensor) <= size

    def own(self, optimizer: Any) -> Iterator[Held]:
        """The optimizer's own holdings now (views of the DDP buffers included)."""
        for place, held in places(optimizer).items():
            if self.is_own(place, held):
                yield held

    def not_own(self, optimizer: Any) -> Iterator[Held]:
        """Holdings that hang off the optimizer but are not its own."""
        for place, held in places(optimizer).items():
            if not self.is_own(place, held):
                yield held


def own_holdings(optimizer: Any, own: OwnState | None) -> Iterator[Held]:
    """The optimizer's own holdings under ``own``, or every holding where there is none."""
    if own is None:
        yield from holdings([optimizer])
    else:
        yield from own.own(optimizer)
