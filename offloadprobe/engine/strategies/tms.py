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

Parameters outside the DDP buffers (frozen ones, a reference model's) go into the backed-up
region the same way on the first offload, one by one, and pause and resume with it (a
framework that uses torch_memory_saver allocates its whole model inside a region). One
that is not there then (a chunk or a ``Parameter`` that appeared after the first offload)
cannot be paused: it is moved through one exact host copy of its own (pinned on CUDA),
kept and reused, and the run's notes say how many went that way.

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
from offloadprobe.engine.host_copies import HostCopies
from offloadprobe.engine.model.buffers import (
    ddp_buffers,
    free_storage,
    loose_to_load,
    loose_to_offload,
    nbytes,
    restore_storage,
)
from offloadprobe.engine.optimizer.holdings import storage_key
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
    """DDP buffers and the parameters outside them in torch_memory_saver regions; offload =
    pause, load = resume. A parameter that was not there when the regions were filled goes
    through a host copy of its own (said in ``notes``)."""

    def __init__(self, runtime: Runtime, saver: Any = None) -> None:
        self.runtime = runtime
        self.saver = saver if saver is not None else load_saver(runtime)
        self._moved = False
        self._paused = False
        self._homed: set[int] = set()
        """Storages of the parameters outside the DDP buffers that are in the region."""
        self._homed_storages: list[torch.UntypedStorage] = []
        self.outside = HostCopies(self._allocate)
        """Host copies of the parameters outside the DDP buffers that are not in a region."""
        self.notes: list[str] = []
        self.setup_seconds = 0.0
        """Time the first offload spent moving the buffers into the regions."""

    def _allocate(self, like: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.empty(
            like.shape, dtype=like.dtype, device="cpu", pin_memory=self.runtime.can_pin
        )

    def _into_region(self, tensor: torch.Tensor, tag: str, backup: bool, keep: bool) -> None:
        saved = tensor.detach().clone() if keep else None
        free_storage(tensor)
        # the old block back to the driver first: torch_memory_saver maps the region's
        # memory itself (cuMemCreate), and a block PyTorch still caches is not free for it
        # (at 12 GiB on the H200 the region's allocation failed, out of memory)
        self.runtime.empty_cache()
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
        for param in loose_to_offload(models):
            self._into_region(param.detach(), PARAMS_TAG, backup=True, keep=True)
            self._homed.add(storage_key(param))
            self._homed_storages.append(param.untyped_storage())
        self.runtime.synchronize()
        self.runtime.empty_cache()  # the old blocks go back to the driver
        self.setup_seconds = time.perf_counter() - start
        self._moved = True

    def _outside(self, params: list[Any]) -> list[Any]:
        return [p for p in params if storage_key(p) not in self._homed]

    def offload(self, models: list[Any]) -> None:
        if not self._paused:  # else offloaded already: a no-op
            self._pause(models)
        outside = self._outside(loose_to_offload(models))
        for param in outside:
            self.outside.for_buffer(storage_key(param), param).copy_(param.detach())
            free_storage(param)
        if outside:
            self._note(len(outside))

    def _note(self, count: int) -> None:
        note = (
            f"tms: {count} parameters outside the DDP buffers were not in torch_memory_saver's "
            "region (they appeared after its first offload) and were not paused: each went "
            "through one exact host copy of its own"
        )
        if note not in self.notes:
            self.notes.append(note)

    def _pause(self, models: list[Any]) -> None:
        import torch

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
            expected += sum(s.nbytes() for s in self._homed_storages)
            freed = torch.cuda.mem_get_info()[0] - free_before
            if freed < expected // 2:
                raise OffloadProbeError(
                    f"torch_memory_saver paused, but the driver got back {freed} bytes of the "
                    f"{expected} in param_data and the parameters outside it: the buffers are "
                    "not in its region"
                )

    def load(self, models: list[Any]) -> None:
        if self._paused:  # else on the device already (or never offloaded): a no-op
            self.saver.resume(PARAMS_TAG)
            self.saver.resume(GRADS_TAG)
            self._paused = False
            for buffer in ddp_buffers(models):
                buffer.grad_data.zero_()
        for param in self._outside(loose_to_load(models)):
            restore_storage(param)
            param.detach().copy_(self.outside.get(storage_key(param)))
        self.runtime.synchronize()

    def released_storages(self, models: list[Any]) -> list[torch.UntypedStorage]:
        """While paused: every DDP buffer's storage and every storage of a parameter outside
        the buffers in the region (unmapped by the driver, still counted as allocated by
        PyTorch)."""
        if not self._paused:
            return []
        buffers = [
            t.untyped_storage() for b in ddp_buffers(models) for t in (b.param_data, b.grad_data)
        ]
        return buffers + list(self._homed_storages)


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
    summary="torch_memory_saver pause / resume with CPU backup (GPU only)",
    factory=TmsStrategy,
    host_events=host_events,
    emulation="cannot run: needs CUDA virtual memory (exits 2 in CPU emulation)",
)
