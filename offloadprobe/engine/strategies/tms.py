"""``tms``: torch_memory_saver's pause/resume with CPU backup (PyPI ``torch-memory-saver``).

torch_memory_saver allocates through CUDA virtual memory: ``pause(tag)`` copies each
allocation of a region made with ``enable_cpu_backup=True`` to host memory (exact size,
``cudaMallocHost`` by default) and unmaps its physical memory, keeping the addresses;
``resume(tag)`` maps it back, copies the backup in and frees the backup. Only memory
allocated *inside* its region can be paused, so the first offload moves each DDP buffer
into a region (hook mode ``torch``: a ``MemPool`` with its allocator): the data is copied
aside on the device, the storage freed and reallocated under the region (every view
stays valid: same storage object), and the data copied back. ``param_data`` lives in a
region with CPU backup; ``grad_data`` in one without (it is zeroed after resume).

Its memory is invisible to PyTorch's allocator statistics (they keep counting paused
buffers as allocated): read ``device_used_after`` (``mem_get_info``) for what the GPU got
back. The first pause checks the driver saw memory freed, so a region that did not
take the buffers fails loudly instead of measuring nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from offloadprobe.core.errors import OffloadProbeError, StrategyError
from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.model.buffers import (
    ddp_buffers,
    free_storage,
    nbytes,
    restore_storage,
)
from offloadprobe.layout.pinned import Alloc, Event, Free

if TYPE_CHECKING:
    import torch

    from offloadprobe.engine.runtime import Runtime

PARAMS_TAG = "offloadprobe-params"
GRADS_TAG = "offloadprobe-grads"
INSTALL = "pip install 'offloadprobe[tms]' (torch-memory-saver 0.0.10, cu12 or cu13 build)"


def load_saver(runtime: Runtime) -> Any:
    """torch_memory_saver's singleton in hook mode ``torch``; a usage error where it cannot run."""
    import torch

    if runtime.emulated or not torch.cuda.is_available():
        raise StrategyError(
            "--strategy tms needs a CUDA GPU (torch_memory_saver pauses CUDA virtual memory); "
            "run it on a GPU node, or choose a strategy that runs in CPU emulation"
        )
    try:
        from torch_memory_saver import torch_memory_saver
    except ImportError as exc:
        raise StrategyError(
            f"--strategy tms: cannot import torch_memory_saver ({exc}); {INSTALL}"
        ) from None
    with contextlib.suppress(AssertionError, AttributeError):  # initialised: keep its mode
        torch_memory_saver.hook_mode = "torch"
    return torch_memory_saver


class TmsStrategy:
    """DDP buffers in torch_memory_saver regions; offload = pause, load = resume."""

    def __init__(self, runtime: Runtime, saver: Any = None) -> None:
        self.runtime = runtime
        self.saver = saver if saver is not None else load_saver(runtime)
        self._moved = False
        self._paused = False
        self.setup_seconds = 0.0
        """Time the first offload spent moving the buffers into the regions."""

    def _into_region(self, tensor: torch.Tensor, tag: str, backup: bool, keep: bool) -> None:
        saved = tensor.detach().clone() if keep else None
        free_storage(tensor)
        with self.saver.region(tag=tag, enable_cpu_backup=backup):
            restore_storage(tensor)
        if saved is not None:
            tensor.copy_(saved)
        del saved

    def _move_into_regions(self, models: list[Any]) -> None:
        start = time.perf_counter()
        for buffer in ddp_buffers(models):
            self._into_region(buffer.param_data, PARAMS_TAG, backup=True, keep=True)
            self._into_region(buffer.grad_data, GRADS_TAG, backup=False, keep=False)
        self.runtime.synchronize()
        self.runtime.empty_cache()  # the old blocks go back to the driver
        self.setup_seconds = time.perf_counter() - start
        self._moved = True

    def offload(self, models: list[Any]) -> None:
        import torch

        if self._paused:  # offloaded already: a no-op
            return
        first = not self._moved
        if first:
            self._move_into_regions(models)
        self.runtime.synchronize()
        free_before = torch.cuda.mem_get_info()[0] if first else 0
        self.saver.pause(PARAMS_TAG)
        self.saver.pause(GRADS_TAG)
        self._paused = True
        if first:
            expected = sum(nbytes(b.param_data) for b in ddp_buffers(models))
            freed = torch.cuda.mem_get_info()[0] - free_before
            if freed < expected // 2:
                raise OffloadProbeError(
                    f"torch_memory_saver paused, but the driver got back {freed} bytes of the "
                    f"{expected} in param_data: the buffers are not in its region"
                )

    def load(self, models: list[Any]) -> None:
        if not self._paused:  # on the device already (or never offloaded): a no-op
            return
        self.saver.resume(PARAMS_TAG)
        self.saver.resume(GRADS_TAG)
        self._paused = False
        for buffer in ddp_buffers(models):
            buffer.grad_data.zero_()
        self.runtime.synchronize()

    def released_storages(self, models: list[Any]) -> list[torch.UntypedStorage]:
        """While paused: every DDP buffer's storage (unmapped by the driver, still counted
        as allocated by PyTorch)."""
        if not self._paused:
            return []
        return [
            t.untyped_storage() for b in ddp_buffers(models) for t in (b.param_data, b.grad_data)
        ]


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """Every pause page-locks an exact-size backup (``cudaMallocHost``), held while paused;
    resume frees it, so the previous cycle's backup is gone before the next pause."""
    events: list[Event] = []
    for c in range(cycles):
        if c:
            events += [Free(name=f"{name} backup, cycle {c - 1}") for name in labels]
        for name, n in zip(labels, payloads, strict=True):
            events.append(Alloc(name=f"{name} backup, cycle {c}", nbytes=n, kind="registered"))
    return events


STRATEGY = ModelStrategyInfo(
    name="tms",
    summary="torch_memory_saver pause/resume, CPU backup (needs a GPU and offloadprobe[tms])",
    factory=TmsStrategy,
    host_events=host_events,
    emulation="cannot run: needs CUDA virtual memory (exits 2 in CPU emulation)",
)
