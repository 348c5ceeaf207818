"""Open and close one probe process's runtime: device, process group, megatron state."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.core import collector, pinned_stats
from offloadprobe.core.config import ParallelConfig
from offloadprobe.core.devices import NO_CUDA
from offloadprobe.core.errors import DeviceUnavailable
from offloadprobe.core.world import World
from offloadprobe.engine.runtime import collectives, emulation, glibc_malloc
from offloadprobe.engine.runtime.cuda_shims import cuda_on_host
from offloadprobe.engine.runtime.eager import EAGER_NOTE, eager_fusions
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


@contextlib.contextmanager
def open_runtime(
    requested: str,
    seed: int,
    parallel: ParallelConfig | None = None,
    *,
    strategy_options: dict[str, str] | None = None,
    emulation_malloc: str = "real",
    engine: str = "megatron",
) -> Iterator[Runtime]:
    """Join the ranks torchrun started (or make a one-rank process group) and initialise
    megatron's parallel state at ``parallel``'s layout; undo on exit. In CPU emulation
    ``emulation_malloc`` says what it does to glibc's malloc (``--emulation-malloc``)."""
    device = resolve_device(requested)
    emulated = device == "cpu"
    notes = [emulation.NOTE, glibc_malloc.note(emulation_malloc)] if emulated else []
    if emulated and eager_fusions():
        notes.append(EAGER_NOTE)
    import_run_modules(engine)  # after eager_fusions: megatron-core is imported uncompiled
    # The CLI collected seldom while it imported; from here a run collects as training
    # does. On CUDA nothing is frozen, as in any training process; CPU emulation freezes
    # the long-lived objects at a run's start anyway.
    collector.resume(freeze=emulated)
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    parallel = parallel or ParallelConfig()
    world = World.from_env(os.environ, parallel)
    with contextlib.ExitStack() as stack:
        if emulated:
            stack.enter_context(cuda_on_host(emulation_malloc))
        else:
            notes.append(cupti_memory.start())  # before CUDA makes anything
            notes.append(pinned_stats.in_use_note(torch.__version__))
            torch.cuda.set_device(world.local_rank)
        control = _join(world, emulated, stack)
        if emulated and world.distributed:
            notes.append(stack.enter_context(collectives.emulated_on_gloo()))
        parallel_state.initialize_model_parallel(
            **world.megatron_sizes,
        )
        stack.callback(parallel_state.destroy_model_parallel)
        # The no-offload reference comparison is bit for bit: ask for deterministic kernels.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        _deterministic_algorithms(True, emulated)
        stack.callback(_deterministic_algorithms, False, emulated)
        torch.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
        yield Runtime(
            device=device,
            emulated=emulated,
            note="; ".join(n for n in notes if n) or None,
            world=world,
            control=control,
            strategy_options=dict(strategy_options or {}),
        )
