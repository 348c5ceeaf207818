"""Open and close one probe process's runtime: device, process group, the engine's state."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.core import collector, pinned_stats
from offloadprobe.core.config import ParallelConfig, RunConfig
from offloadprobe.core.devices import NO_CUDA
from offloadprobe.core.engines import engine
from offloadprobe.core.errors import DeviceUnavailable
from offloadprobe.core.world import World
from offloadprobe.engine.runtime import emulation, glibc_malloc
from offloadprobe.engine.runtime.cuda_shims import cuda_on_host
from offloadprobe.engine.runtime.eager import EAGER_NOTE, eager_fusions
from offloadprobe.engine.runtime.engine_session import (
    EngineSessionFactory,
    SessionContext,
    one_group,
)
from offloadprobe.engine.runtime.imports import import_run_modules
from offloadprobe.measure import cupti_memory


@dataclass(frozen=True, kw_only=True, slots=True)
class Runtime:
    """The device a run uses and what that device can and cannot do."""

    device: str
    """``"cuda"`` or ``"cpu"``."""
    emulated: bool
    """True when megatron's CUDA objects live in host memory (no GPU on this host)."""
    note: str | None
    """What is emulated, in words, printed with every result."""
    world: World = field(default_factory=World)
    """This rank's place among the ranks and the parallel layout (one rank by default)."""
    control: Any = None
    """A CPU-side (gloo) process group over every rank, for barriers and
    ``gather_object`` between phases; None for one rank."""
    strategy_options: dict[str, str] = field(default_factory=dict)
    """``--strategy-option key=value`` pairs, for the strategy's factory to read."""
    engine: str = "megatron"
    """The training engine (``core.engines``) whose session made this runtime."""
    engine_world: Any = None
    """What the engine's session made for its factory (FSDP2: its ``Fsdp2World``)."""
    collectives_real: bool = True
    """False under a fake process group: no reference trajectory (trained values are not
    a real run's)."""
    strategy: str | None = None
    """The run's model strategy spec, for an engine that builds for it (FSDP2's ``BUILD``)."""

    @property
    def load_device(self) -> Any:
        """The device id a load that takes one gets (verl's ``get_device_id()``): the current
        CUDA device's index; ``"cuda"`` in CPU emulation (the emulated device)."""
        return torch.cuda.current_device() if not self.emulated else "cuda"

    def control_group(self) -> Any:
        """The gloo group over every rank (on CUDA a separate one, so control traffic never
        touches NCCL or the device); None (the default group) for one rank."""
        return self.control

    @property
    def can_pin(self) -> bool:
        """Whether page-locked host memory exists here."""
        return self.device == "cuda"

    @property
    def device_memory(self) -> emulation.DeviceMemory | None:
        """CPU emulation: the emulated device's memory (registry + ballast); None on CUDA."""
        return emulation.active() if self.emulated else None

    def on_device(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` occupies device memory now, by where its bytes live."""
        if not self.emulated:
            return tensor.is_cuda and tensor.untyped_storage().nbytes() > 0
        return emulation.on_device(tensor)

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op in CPU emulation)."""
        if self.device == "cuda":
            torch.cuda.synchronize()

    def settle(self) -> None:
        """Around a phase, in CPU emulation: collect cyclic garbage, then free device storages
        nothing references any more (as a GPU allocator does), through the device so the
        ballast compensates.
        No ``malloc_trim`` here: free heap pages the strategy's own frees left resident are
        host memory a GPU host's process keeps too (glibc's dynamic threshold); only a train
        step's are given back (``glibc_malloc.device_work_done``).
        On CUDA this does nothing: the strategy's own caching behaviour is measured."""
        memory = self.device_memory
        if memory is not None:
            import gc

            gc.collect()  # cyclic garbage goes now, not at a random point inside a phase
            memory.reconcile()  # first: what reclaim frees must not hide a resize behind it
            memory.reclaim()

    def release(self) -> None:
        """Give freed memory back after a model was dropped (between two builds)."""
        import gc

        gc.collect()
        if self.emulated:
            self.settle()
            emulation.trim_host_heap()
        else:
            torch.cuda.empty_cache()

    def strategy_code(self) -> contextlib.AbstractContextManager[None]:
        """Around a strategy's own code: in CPU emulation what it computes from device
        memory is device memory, as on a GPU (on CUDA, where that holds anyway, nothing)."""
        return emulation.strategy_code() if self.emulated else contextlib.nullcontext()

    def empty_cache(self) -> None:
        """Return cached device blocks to the driver (a no-op in CPU emulation)."""
        if self.device == "cuda":
            torch.cuda.empty_cache()


def resolve_device(requested: str) -> str:
    """Map ``auto``/``cuda``/``cpu`` to the device this host can run."""
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise DeviceUnavailable(NO_CUDA)
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def _deterministic_algorithms(on: bool, emulated: bool) -> None:
    """``torch.use_deterministic_algorithms(on, warn_only=True)``. In CPU emulation without
    importing inductor's config for its flag (nothing is compiled there; the import alone
    takes about a second of CPU in every process)."""
    if emulated and "torch._inductor" not in sys.modules:
        torch._C._set_deterministic_algorithms(on, warn_only=True)
    else:
        torch.use_deterministic_algorithms(on, warn_only=True)


def _control_group(emulated: bool) -> Any:
    """A gloo group over every rank: the default group in CPU emulation, a new one beside
    NCCL on CUDA (a collective call: every rank makes it)."""
    if emulated:
        return torch.distributed.group.WORLD
    return torch.distributed.new_group(backend="gloo")


def _join(world: World, emulated: bool, stack: contextlib.ExitStack) -> Any:
    """Join the process group (or make a one-rank one); return the control group.

    A process group the caller initialised already is used as it is (and left to it)."""
    if world.distributed and torch.distributed.is_initialized():
        return _control_group(emulated)
    if torch.distributed.is_initialized():
        return None
    if world.distributed:
        # torchrun's rendezvous variables (MASTER_ADDR/PORT, RANK, WORLD_SIZE), in a store
        # namespace of this worker's own: torchrun's agent keeps one store for the whole
        # job, and a process group made in it before (by the user's code in the parent
        # process, say) left its keys there, its ranks' addresses among them
        store, rank, size = next(torch.distributed.rendezvous("env://"))
        generation = store.add(f"offloadprobe/generation/{rank}", 1)
        store = torch.distributed.PrefixStore(f"offloadprobe/{generation}/", store)
        torch.distributed.init_process_group(
            backend="gloo" if emulated else "nccl", store=store, rank=rank, world_size=size
        )
        stack.callback(torch.distributed.destroy_process_group)
        return _control_group(emulated)
    # One rank: an in-memory store, so no TCP port is picked and then taken by a
    # neighbouring process first (probes run side by side: under pytest, in a sweep; on
    # the H200 a port picked free was in use by the time the store listened, EADDRINUSE)
    torch.distributed.init_process_group(
        backend="gloo" if emulated else "nccl",
        store=torch.distributed.HashStore(),
        rank=0,
        world_size=1,
    )
    stack.callback(torch.distributed.destroy_process_group)
    return None


def _engine_session(name: str) -> EngineSessionFactory:
    """The engine's session factory (``EngineInfo.session``), imported by name."""
    from offloadprobe.engine.descriptors import resolve

    found = engine(name).session
    return resolve(found) if found is not None else one_group


@contextlib.contextmanager
def open_runtime(
    requested: str,
    seed: int,
    parallel: ParallelConfig | None = None,
    *,
    strategy_options: dict[str, str] | None = None,
    emulation_malloc: str = "real",
    engine: str = "megatron",
    strategy: str | None = None,
) -> Iterator[Runtime]:
    """Join the ranks torchrun started (or make a one-rank process group) and make the
    engine's parallel state at ``parallel``'s layout (its session: megatron-core's
    ``parallel_state``, FSDP2's mesh); undo on exit. In CPU emulation ``emulation_malloc``
    says what it does to glibc's malloc (``--emulation-malloc``). ``strategy``: the run's
    model strategy, for an engine that builds for it (FSDP2's ``BUILD``)."""
    device = resolve_device(requested)
    emulated = device == "cpu"
    notes = [emulation.NOTE, glibc_malloc.note(emulation_malloc)] if emulated else []
    if emulated and engine == "megatron" and eager_fusions():
        notes.append(EAGER_NOTE)
    import_run_modules(engine)  # after eager_fusions: megatron-core is imported uncompiled
    # The CLI collected seldom while it imported; from here a run collects as training
    # does. On CUDA nothing is frozen, as in any training process; CPU emulation freezes
    # the long-lived objects at a run's start anyway.
    collector.resume(freeze=emulated)
    parallel = parallel or ParallelConfig()
    world = World.from_env(os.environ, parallel)
    with contextlib.ExitStack() as stack:
        if emulated:
            stack.enter_context(cuda_on_host(emulation_malloc))
        else:
            notes.append(cupti_memory.start())  # before CUDA makes anything
            notes.append(pinned_stats.in_use_note(torch.__version__))
            torch.cuda.set_device(world.local_rank)
        context = SessionContext(
            world=world,
            parallel=parallel,
            emulated=emulated,
            seed=seed,
            stack=stack,
            join=lambda: _join(world, emulated, stack),
        )
        made = stack.enter_context(_engine_session(engine)(context))
        notes += made.notes
        # The no-offload reference comparison is bit for bit: ask for deterministic kernels.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        _deterministic_algorithms(True, emulated)
        stack.callback(_deterministic_algorithms, False, emulated)
        torch.manual_seed(seed)
        yield Runtime(
            device=device,
            emulated=emulated,
            note="; ".join(n for n in notes if n) or None,
            world=world,
            control=made.control,
            strategy_options=dict(strategy_options or {}),
            engine=engine,
            engine_world=made.handle,
            collectives_real=made.collectives_real,
            strategy=strategy,
        )


def runtime_for(cfg: RunConfig) -> contextlib.AbstractContextManager[Runtime]:
    """:func:`open_runtime` for one run's configuration (its device, seed, layout, options,
    engine and model strategy)."""
    return open_runtime(
        cfg.device,
        cfg.seed,
        cfg.parallel,
        strategy_options=cfg.strategy_options,
        emulation_malloc=cfg.emulation_malloc,
        engine=cfg.engine,
        strategy=cfg.strategy,
    )
