"""The 8-byte words the content search anchors on, as a buffer holds them: from its first
aligned address, the informative ones only (``param_copies``)."""

from __future__ import annotations

import torch


def aligned_words(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(words, bytes)``: the tensor's bytes from its first 8-byte-aligned address on, as
    whole int64 words (a view packed 4 bytes into a storage starts off the 8-byte grid the
    search reads regions on), and how many bytes those words hold."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    skip = min(raw.numel(), (-raw.data_ptr()) % 8)
    raw = raw[skip:]
    size = raw.numel() // 8 * 8
    return raw[:size].view(torch.int64), size


def constant(words: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
    """True (for every pick) where the whole buffer is one repeated word (an RMSNorm's
    ones, a zeroed bias): its bytes are everywhere, a copy of them is no evidence, and a
    match could not say where in the buffer it lies; False otherwise."""
    same = picked.numel() and bool((picked == picked[0]).all())
    if same and bool((words == words[:1]).all()):
        return torch.ones_like(picked, dtype=torch.bool)
    return torch.zeros_like(picked, dtype=torch.bool)


def informative(words: torch.Tensor) -> torch.Tensor:
    """Mask of words that are not four equal 16-bit elements."""
    lanes = words.view(torch.int16).view(-1, 4)
    return (lanes != lanes[:, :1]).any(dim=1)
