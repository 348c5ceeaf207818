"""Open and close one probe process's runtime: device, process group, megatron state."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from offloadprobe.core.errors import DeviceUnavailable
from offloadprobe.engine.runtime import emulation


@dataclass(frozen=True, kw_only=True, slots=True)
class Runtime:
    """The device a run uses and what that device can and cannot do."""

    device: str
    """``"cuda"`` or ``"cpu"``."""
    emulated: bool
    """True when megatron's CUDA objects live in host memory (no GPU on this host)."""
    note: str | None
    """What is emulated, in words, printed with every result."""

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
        On CUDA this does nothing: the strategy's own caching behaviour is measured."""
        memory = self.device_memory
        if memory is not None:
            import gc

            gc.collect()  # cyclic garbage goes now, not at a random point inside a phase
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

    def empty_cache(self) -> None:
        """Return cached device blocks to the driver (a no-op in CPU emulation)."""
        if self.device == "cuda":
            torch.cuda.empty_cache()


def resolve_device(requested: str) -> str:
    """Map ``auto``/``cuda``/``cpu`` to the device this host can run."""
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise DeviceUnavailable(
            "--device cuda was requested but this host has no usable CUDA device: "
            "run on a GPU node or use --device cpu for the CPU emulation"
        )
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def open_runtime(requested: str, seed: int) -> Iterator[Runtime]:
    """Initialise a one-rank process group and megatron's parallel state; undo on exit."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    device = resolve_device(requested)
    emulated = device == "cpu"
    with contextlib.ExitStack() as stack:
        if emulated:
            stack.enter_context(emulation.cuda_on_host())
        else:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if not torch.distributed.is_initialized():
            # CPU emulation: an in-memory store, so no TCP port is picked and then taken
            # by a neighbouring process first (probes run side by side under pytest).
            where = (
                {"store": torch.distributed.HashStore()}
                if emulated
                else {"init_method": f"tcp://127.0.0.1:{_free_port()}"}
            )
            torch.distributed.init_process_group(
                backend="gloo" if emulated else "nccl", rank=0, world_size=1, **where
            )
            stack.callback(torch.distributed.destroy_process_group)
        parallel_state.initialize_model_parallel(1, 1)
        stack.callback(parallel_state.destroy_model_parallel)
        # The no-offload reference comparison is bit for bit: ask for deterministic kernels.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        stack.callback(torch.use_deterministic_algorithms, False)
        torch.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
        yield Runtime(device=device, emulated=emulated, note=emulation.NOTE if emulated else None)
