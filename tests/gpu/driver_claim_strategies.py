"""Strategies that say they released ``param_data`` and ``grad_data`` through the driver
(``released_storages``, which makes any strategy ``ReleasesThroughDriver``) and move
nothing. Plugged in as ``tests.gpu.driver_claim_strategies:X``."""

from __future__ import annotations

import ctypes.util

import torch

from offloadprobe.plugin import ddp_buffers

MiB = 2**20


def _storages(models) -> list[torch.UntypedStorage]:
    found = [t.untyped_storage() for b in ddp_buffers(models) for t in (b.param_data, b.grad_data)]
    return list({s._cdata: s for s in found}.values())


class ReservesWhatNothingBacks:
    """Each offload has PyTorch reserve the claimed bytes (and a little more than the last
    time, so no cached block serves it) in a ``MemPool`` whose pluggable allocator is
    libc's ``malloc``/``free``: host addresses, never touched (the run's deterministic
    mode would fill a new tensor, a kernel writing to a host address: the fill is turned
    off around the allocation, as an adversary would). PyTorch's reserved bytes grow by
    the claim; the device gives nothing back, and nothing is allocated."""

    def __init__(self) -> None:
        libc = ctypes.util.find_library("c") or "libc.so.6"
        allocator = torch.cuda.memory.CUDAPluggableAllocator(libc, "malloc", "free")
        self.pool = torch.cuda.MemPool(allocator.allocator())
        self.offloads = 0
        self.claimed = False

    def offload(self, models):
        self.offloads += 1
        nbytes = sum(s.nbytes() for s in _storages(models)) + self.offloads * 2 * MiB
        fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.utils.deterministic.fill_uninitialized_memory = False
        try:
            with torch.cuda.use_mem_pool(self.pool):
                block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = fill
        del block  # cached in the pool: reserved stays, allocated goes back
        self.claimed = True

    def load(self, models):
        self.claimed = False

    def released_storages(self, models):
        return _storages(models) if self.claimed else []
