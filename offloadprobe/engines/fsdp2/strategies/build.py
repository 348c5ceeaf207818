"""What a strategy asks of the engine's model build: FSDP2's ``CPUOffloadPolicy`` as a row.

``CPUOffloadPolicy`` is not an offload pair: it is a ``fully_shard`` argument. With it,
FSDP2 keeps every sharded parameter and gradient in host memory for the whole job
(copied host-to-device before each all-gather, device-to-host in backward) and the
optimizer steps on the host with host state; ``pin_memory`` pins the shards and
gradients. So its rows are strategies whose offload and load move nothing, and whose
module exports ``BUILD``, a :class:`FsdpBuild` saying how the engine must wrap the model
for the row to mean anything; the strategy refuses a model built otherwise (one line).
``verl_fsdp1`` uses the same field to ask for FSDP1's wrapper. A strategy module without
``BUILD`` takes the default build (``fully_shard`` per block, no offload policy).

Torch-free: ``plan`` and ``show`` read it; :func:`offload_policy` imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Wrap = Literal["fully_shard", "fsdp1"]
HostPolicy = Literal["none", "pinned", "pageable"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FsdpBuild:
    """How the engine wraps the model for one strategy."""

    wrap: Wrap = "fully_shard"
    """FSDP2's ``fully_shard`` per block (the default) or FSDP1's
    ``FullyShardedDataParallel`` (``verl_fsdp1``, GPU only)."""
    cpu_offload: HostPolicy = "none"
    """``CPUOffloadPolicy``: none, with ``pin_memory=True`` or with ``pin_memory=False``."""
    needs_gpu: bool = False
    """True where the row cannot be built without CUDA (FSDP1)."""

    def __post_init__(self) -> None:
        if self.wrap == "fsdp1" and self.cpu_offload != "none":
            raise ValueError("an FSDP1 build takes no CPUOffloadPolicy here")

    def note(self, can_pin: bool) -> str | None:
        """What the run must say about this build on this host; None when nothing."""
        if self.cpu_offload == "pinned" and not can_pin:
            return (
                "CPUOffloadPolicy(pin_memory=True) built with pin_memory=False: no pinned "
                "memory without CUDA (the closest honest equivalent)"
            )
        return None

    def offload_policy(self, can_pin: bool) -> Any:
        """The ``offload_policy`` argument for ``fully_shard``: ``OffloadPolicy()`` (none)
        or ``CPUOffloadPolicy(pin_memory=...)``, pinning only where it exists."""
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

        if self.cpu_offload == "none":
            return OffloadPolicy()
        return CPUOffloadPolicy(pin_memory=self.cpu_offload == "pinned" and can_pin)


DEFAULT_BUILD = FsdpBuild()


def build_of(module: Any) -> FsdpBuild:
    """A strategy module's ``BUILD``, or the default build."""
    found = getattr(module, "BUILD", None)
    return found if isinstance(found, FsdpBuild) else DEFAULT_BUILD


class PolicyKeepsHost:
    """Offload and load move nothing: the model was built with ``CPUOffloadPolicy``, which
    keeps shards, gradients and optimizer state in host memory all the time. Each call
    checks that the model was built so (``FSDPParam.offload_to_cpu``), and refuses one
    that was not: a row that silently moved nothing would read as a perfect offload."""

    pin_memory: bool

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def _check(self, model: Any) -> None:
        from offloadprobe.core.errors import UsageError
        from offloadprobe.engines.fsdp2.strategies.common import can_pin, fsdp_params

        params = list(fsdp_params(model))
        wanted = "on" if self.pin_memory else "off"
        pins = self.pin_memory and can_pin(self.runtime)
        if not params or not all(p.offload_to_cpu and p.pin_memory == pins for p in params):
            raise UsageError(
                f"this row needs the model built with CPUOffloadPolicy(pin_memory {wanted}); "
                "build it with the strategy module's BUILD"
            )

    def offload(self, model: Any) -> None:
        self._check(model)

    def load(self, model: Any) -> None:
        self._check(model)
