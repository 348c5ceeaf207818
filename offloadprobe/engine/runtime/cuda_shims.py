"""The CUDA calls megatron-core makes that a CPU-only host answers as a GPU would:
streams and events that are always done, the current device, CUDA RNG states from the
host's; with the emulated device (``emulation.emulated_device``) under them."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from unittest import mock

import torch

from offloadprobe.core import collector
from offloadprobe.engine.runtime.emulation import emulated_device
from offloadprobe.engine.runtime.imports import import_run_modules


class NullEvent:
    """A recorded event on the host: every wait is already over."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: object) -> None:
        pass

    def query(self) -> bool:
        return True

    def record(self, *args: object) -> None:
        pass


class NullStream:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_stream(self, *args: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: object) -> NullEvent:
        return NullEvent()

    def wait_event(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist before the run out of the cyclic collector's sight.

    ``Runtime.settle`` collects cyclic garbage around every phase. A full collection walks
    every tracked object, some 400,000 once torch and megatron-core are imported (0.2 s
    each time, several seconds a run); frozen, they are skipped, and a collection only
    walks what the run itself created. The modules a run would import lazily (torch's
    compiler stack on the first optimizer step, megatron's model and optimizer) are
    imported first, so that their objects are frozen with the rest. Garbage that exists
    now is collected first, so nothing the run could free is frozen. Everything is
    unfrozen at the end, unless the caller had frozen objects of its own before (a test
    session does): unfreezing is then the caller's, and what was frozen here stays frozen
    with them.
    """
    import_run_modules()  # imported by every run anyway: their objects are frozen too
    outer = collector.frozen()
    gc.collect()
    collector.freeze_objects()
    try:
        yield
    finally:
        if not outer:
            collector.unfreeze_objects()


@contextlib.contextmanager
def cuda_on_host(malloc: str = "real") -> Iterator[None]:
    """Install the shims for the duration of the block, then restore everything
    (``malloc``: ``emulation.emulated_device``'s)."""
    host_rng = lambda *a, **k: torch.get_rng_state()  # noqa: E731
    patches = [
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.synchronize", lambda *a, **k: None),
        mock.patch("torch.cuda.empty_cache", lambda: None),
        mock.patch("torch.cuda.Stream", NullStream),
        mock.patch("torch.cuda.Event", NullEvent),
        mock.patch("torch.cuda.stream", lambda *a, **k: contextlib.nullcontext()),
        mock.patch("torch.cuda.default_stream", lambda *a, **k: NullStream()),
        mock.patch("torch.cuda.current_stream", lambda *a, **k: NullStream()),
        mock.patch("torch.cuda.manual_seed", lambda *a, **k: None),
        mock.patch("torch.cuda.get_rng_state", host_rng),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(long_lived_objects_frozen())
        stack.enter_context(emulated_device(malloc))
        yield
