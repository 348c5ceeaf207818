"""What an engine's session is given and gives back when a runtime opens.

The harness opens the device (CPU emulation's shims, or CUDA with CUPTI), then enters the
engine's session (``EngineInfo.session``): the engine joins its ranks (through
:attr:`SessionContext.join`, the harness's join of torchrun's ranks or a one-rank group,
or a process group of its own) and makes its parallel state (megatron-core's
``parallel_state``; FSDP2's device mesh). What it says back, :class:`EngineSession`, is
read by the harness only: the control group for barriers, notes for every result, and
whether the run's collectives are real (a no-offload reference trajectory means nothing
where they are not). The engine's own objects travel in ``handle``, for its factory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.core.config import ParallelConfig
from offloadprobe.core.world import World


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionContext:
    """What the engine's session may use."""

    world: World
    """This rank's place among torchrun's ranks (one rank when not under torchrun)."""
    parallel: ParallelConfig
    emulated: bool
    """True in CPU emulation: the device is host memory behind ``cuda_on_host``."""
    seed: int
    stack: contextlib.ExitStack
    """Where the session registers what undoes it (the runtime's own stack)."""
    join: Callable[[], Any]
    """Join torchrun's ranks (gloo in CPU emulation, NCCL on GPUs) or make a one-rank
    group; returns the control group (None for one rank)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSession:
    """What the engine's session made."""

    control: Any = None
    """The gloo group over every rank (None for one rank)."""
    notes: list[str] = field(default_factory=list)
    """What is emulated or not real here, for every result."""
    collectives_real: bool = True
    """False where collectives return without doing their work (a fake process group):
    the run's trained values are not a real run's, so no reference trajectory is kept."""
    handle: Any = None
    """The engine's own (FSDP2's ``Fsdp2World``), for its factory (``Runtime.engine_world``)."""


EngineSessionFactory = Callable[[SessionContext], contextlib.AbstractContextManager[EngineSession]]


@contextlib.contextmanager
def one_group(context: SessionContext) -> Iterator[EngineSession]:
    """An engine without a session of its own: the harness's group, nothing else."""
    yield EngineSession(control=context.join())


__all__ = ["EngineSession", "EngineSessionFactory", "SessionContext", "one_group"]
