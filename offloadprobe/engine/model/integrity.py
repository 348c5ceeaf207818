"""Bit-for-bit round-trip checks of the DDP buffers.

Each ``param_data`` buffer is fingerprinted before offload by two 64-bit sums over
its raw words (plain and position-weighted, computed on the device in chunks), so
any changed, zeroed or shifted word changes the fingerprint. After load the
fingerprints must match, and ``grad_data`` must be all zeros.
"""

from __future__ import annotations

from typing import Any

import torch

from offloadprobe.engine.strategies.base import ddp_buffers, nbytes

_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 1 << 24


def fingerprint(tensor: torch.Tensor) -> tuple[int, int]:
    """(sum, position-weighted sum) of the tensor's raw words, wrapping in int64."""
    words = tensor.detach().reshape(-1).view(_WORD[tensor.element_size()])
    total, weighted = 0, 0
    for start in range(0, words.numel(), _CHUNK):
        chunk = words[start : start + _CHUNK].to(torch.int64)
        pos = torch.arange(start, start + chunk.numel(), device=chunk.device) % 65521 + 1
        total += int(chunk.sum())
        weighted += int((chunk * pos).sum())
    return total, weighted


def _storage_ok(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().size() >= nbytes(tensor)


def fingerprint_buffers(models: list[Any]) -> list[tuple[int, int]]:
    """Fingerprint of every DDP buffer's ``param_data``, in buffer order."""
    return [fingerprint(b.param_data) for b in ddp_buffers(models)]


def verify_round_trip(
    models: list[Any], before: list[tuple[int, int]], cycle: int, *, grads_zeroed: bool = True
) -> list[str]:
    """Problems found after a load; an empty list means every byte came back.

    ``grads_zeroed``: the strategy freed ``grad_data``, so load must hand it back zeroed.
    """
    problems = []
    for index, buffer in enumerate(ddp_buffers(models)):
        label = f"cycle {cycle}, buffer {index} ({buffer.param_data.dtype})"
        if not _storage_ok(buffer.param_data):
            problems.append(f"{label}: param_data storage was not restored by load")
            continue
        if index >= len(before) or fingerprint(buffer.param_data) != before[index]:
            problems.append(f"{label}: param_data differs from before offload")
        if not _storage_ok(buffer.grad_data):
            problems.append(f"{label}: grad_data storage was not restored by load")
        elif grads_zeroed and bool(buffer.grad_data.any()):
            problems.append(f"{label}: grad_data is not zero after load")
    return problems
