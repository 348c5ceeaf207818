"""A strategy whose host figures depend on glibc's malloc: one fresh pageable host copy per
parameter every offload, dropped at the load (verl's and FSDP2's per-tensor offload).
Plugged in as ``tests.integration.malloc_strategies:X``.

Under glibc's dynamic mmap threshold, the first free of a large mapped chunk raises the
threshold to its size (up to 32 MiB): later copies under it come from the heap, and their
frees leave the pages resident. On the H200 such an offload held 0.01x, 0.63x, 0.82x of
its bytes after the loads of cycles 0, 1, 2; with a fixed threshold, 0.00x.
"""

from __future__ import annotations

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage

DROPPED: list[tuple[int, int]] = []
"""``(address, bytes)`` of every host copy the last load dropped: where a test looks for
the pages glibc kept resident (``mincore``)."""


class PerTensorPageable:
    """``p.detach().cpu()`` per parameter (a fresh pageable copy of its slice of the DDP
    buffer) every offload; the whole buffer's storage freed; at the load the buffer is
    restored, each copy written back and every copy dropped."""

    def __init__(self) -> None:
        self.copies: list[list[torch.Tensor]] = []

    def offload(self, models):
        self.copies = []
        for buffer in ddp_buffers(models):
            flat = buffer.param_data
            self.copies.append([flat[start:end].detach().cpu() for start, end in _slices(buffer)])
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for buffer, pairs in zip(ddp_buffers(models), self.copies, strict=True):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            for (start, end), host in zip(_slices(buffer), pairs, strict=True):
                buffer.param_data[start:end].copy_(host)
            buffer.grad_data.zero_()
        DROPPED[:] = [(h.data_ptr(), h.nbytes) for pairs in self.copies for h in pairs]
        self.copies = []  # every host copy freed here


def _slices(buffer) -> list[tuple[int, int]]:
    """Each parameter's ``(start, end)`` in the buffer (megatron's param index map)."""
    return sorted((start, end) for start, end, _ in buffer.param_index_map.values())
