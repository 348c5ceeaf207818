"""PyTorch's pinned host allocator statistics, read through ``core.pinned_stats`` (both
key schemas; the in-use figure only where this torch's counters count frees)."""

from __future__ import annotations

from typing import Any

import torch

from offloadprobe.core import pinned_stats
from offloadprobe.core.records import PinnedReading
from offloadprobe.measure import cupti_memory


def normalise(stats: dict[str, Any]) -> tuple[int, int | None, int, str]:
    """``(reserved, in_use, reserved_peak, schema)`` from flat host_memory_stats keys under
    the torch imported here (in use None where its counters miss frees)."""
    figures = pinned_stats.read(stats, torch.__version__)
    return figures.reserved, figures.in_use, figures.reserved_peak, figures.schema


class PinnedProbe:
    """Pinned bytes PyTorch's CachingHostAllocator owns; inactive without CUDA."""

    name = "pinned"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and hasattr(torch.cuda, "host_memory_stats")
        self._since = 0

    def begin(self) -> None:
        if self.enabled and hasattr(torch.cuda, "reset_peak_host_memory_stats"):
            torch.cuda.reset_peak_host_memory_stats()
        source = cupti_memory.pinned()
        if source is not None:
            self._since = source.now()

    def end(self) -> PinnedReading | None:
        if not self.enabled:
            return None
        reserved, in_use, peak, schema = normalise(torch.cuda.host_memory_stats())
        locked = locked_peak = None
        source = cupti_memory.pinned()
        if source is not None:  # by fact: every allocator, page-locking from any thread
            source.flush()
            locked = source.log.live(cupti_memory.LOCKED)
            locked_peak = source.log.peak(cupti_memory.LOCKED, self._since)
        return PinnedReading(
            reserved_after=reserved,
            in_use_after=in_use,
            reserved_peak=max(peak, reserved),
            key_schema=schema,
            locked_after=locked,
            locked_peak=locked_peak,
        )


def raw_stats() -> dict[str, Any]:
    """The unnormalised statistics, for the JSON record (empty without CUDA)."""
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "host_memory_stats"):
        return {}
    return dict(torch.cuda.host_memory_stats())
