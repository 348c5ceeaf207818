"""What the harness asks of an engine's built training state.

The runner builds the state (megatron-core's ``ProbeModel`` by default; another engine's
through ``run_cycles(..., build_state=...)``), then reads only this: the inventory of
every tensor it holds (``core.roles``), its train step, what its strategies receive, and
its payload. The audit, the ledger, residency, integrity, the reference check, transfers
and the checkpoint step read the inventory, never the engine's own objects.

Torch-free at import.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from offloadprobe.core.roles import Holding, Role


@runtime_checkable
class TrainingState(Protocol):
    """An engine's built training state (one run's model, optimizer and batch)."""

    optimizer: Any
    """The optimizer an optimizer strategy receives (``strategy_args("optimizer")``)."""
    optimizer_name: str
    """Which optimizer computes the step, in words."""

    @property
    def payload_bytes(self) -> int:
        """Bytes of parameters a model strategy must move."""

    @property
    def grad_bytes(self) -> int:
        """Bytes of gradients an offload frees."""

    @property
    def modules(self) -> list[Any]:
        """The modules a checkpoint saves (their ``state_dict``)."""

    def inventory(self, own: Any = None) -> list[Holding]:
        """Every tensor the state holds, each once (``own``: the engine's record of what
        its optimizer made itself, where it keeps one)."""

    def labels(self) -> dict[str, str]:
        """A model parameter's name for holdings that have one, by key (shown only)."""

    def restores(self, holding: Holding) -> bool:
        """Whether a round trip must bring this holding's bytes back."""

    def hung(self, own: Any) -> list[Holding]:
        """Tensors that hang off the optimizer but are not its own (named so)."""

    def optimizer_groups(self) -> list[list[dict[str, Any]]]:
        """The optimizers' param groups (their values must survive a round trip)."""

    def view_problems(self, cycle: int) -> list[str]:
        """Views the engine keeps into its tensors that a round trip broke."""

    def strategy_args(self, part: str) -> list[Any]:
        """What a ``params`` or ``optimizer`` strategy's offload and load receive."""

    def train(self, steps: int) -> float | None:
        """``steps`` train steps; the last loss (None for none)."""


def engine_factory(name: str) -> Any:
    """The engine's factory (``EngineInfo.factory``), imported by name: ``(model config,
    runtime, *, seed, optimizer) -> training state``."""
    from offloadprobe.core.engines import engine
    from offloadprobe.engine.descriptors import resolve

    return resolve(engine(name).factory)


def without_reference(cfg: Any, runtime: Any) -> Any:
    """``cfg`` without its reference check where the runtime's collectives are not real
    (a fake process group: a no-offload run's trained values mean nothing; the runtime's
    note says so). Every round trip is still checked byte for byte."""
    import dataclasses

    if getattr(runtime, "collectives_real", True) or not cfg.reference_check:
        return cfg
    return dataclasses.replace(cfg, reference_check=False)


def inventory_of(state: Any, own: Any = None) -> list[Holding]:
    """``state.inventory(own)``; a stand-in without one (a test's object holding megatron's
    chunks and optimizer) is read as megatron's."""
    method = getattr(state, "inventory", None)
    if method is not None:
        return list(method(own))
    from offloadprobe.engine.model.inventory import inventory

    return inventory(state, own)


def owner_roles(holdings: list[Holding]) -> dict[str, str]:
    """``{owner: its role's value}`` of an inventory (each owner one role)."""
    return {h.owner: h.role.value for h in holdings}


def role_bytes(holdings: list[Holding], role: Role) -> int:
    """Logical bytes the holdings of ``role`` hold (the same before and after an offload)."""
    return sum(int(h.tensor.numel() * h.tensor.element_size()) for h in holdings if h.role is role)


PARTS = (Role.FROZEN, Role.REFERENCE)
"""Roles of the model's parts beside its parameters that a model strategy moves too."""


def part_bytes(holdings: list[Holding]) -> dict[str, int]:
    """Bytes each part beside the parameters holds, by owner (logical sizes)."""
    totals: dict[str, int] = {}
    for h in holdings:
        if h.role in PARTS:
            nbytes = int(h.tensor.numel() * h.tensor.element_size())
            totals[h.owner] = totals.get(h.owner, 0) + nbytes
    return totals


__all__ = [
    "TrainingState",
    "engine_factory",
    "inventory_of",
    "owner_roles",
    "part_bytes",
    "role_bytes",
    "without_reference",
]
