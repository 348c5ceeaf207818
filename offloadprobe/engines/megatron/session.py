"""megatron-core's session: its ranks joined, its parallel state made, for one runtime."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import torch

from offloadprobe.engine.runtime import collectives
from offloadprobe.engine.runtime.engine_session import EngineSession, SessionContext


def _host_rng(stack: contextlib.ExitStack) -> None:
    """CPU emulation: megatron's CUDA RNG tracker reads and sets the host generator's state
    (there is no CUDA generator)."""
    import megatron.core.tensor_parallel.random as mrandom

    host_rng = lambda *a, **k: torch.get_rng_state()  # noqa: E731
    stack.enter_context(mock.patch.object(mrandom, "_get_cuda_rng_state", host_rng))
    stack.enter_context(mock.patch.object(mrandom, "_set_cuda_rng_state", lambda *a, **k: None))


@contextlib.contextmanager
def megatron_session(context: SessionContext) -> Iterator[EngineSession]:
    """Join the ranks (the harness's join), replace gloo's collectives where CPU emulation
    spans several ranks, and initialise ``parallel_state`` at the world's sizes."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    stack, world = context.stack, context.world
    if context.emulated:
        _host_rng(stack)
    control = context.join()
    notes = []
    if context.emulated and world.distributed:
        notes.append(stack.enter_context(collectives.emulated_on_gloo()))
    parallel_state.initialize_model_parallel(**world.megatron_sizes)
    stack.callback(parallel_state.destroy_model_parallel)
    torch.manual_seed(context.seed)
    model_parallel_cuda_manual_seed(context.seed)
    yield EngineSession(control=control, notes=notes)
