"""GPU memory from PyTorch's CUDA caching allocator, peaks reset per phase, and (where
CUPTI records) what this process allocated outside it."""

from __future__ import annotations

import torch

from offloadprobe.core.records import GpuReading
from offloadprobe.measure import cupti_memory


class GpuProbe:
    """Allocated/reserved bytes (current and peak) and the driver's used bytes."""

    name = "gpu"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._allocated_before = 0

    def begin(self) -> None:
        if self.enabled:
            torch.cuda.reset_peak_memory_stats()
            self._allocated_before = torch.cuda.memory_allocated()

    def end(self) -> GpuReading | None:
        if not self.enabled:
            return None
        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        outside = cupti_memory.outside_pytorch(reserved)
        return GpuReading(
            allocated_before=self._allocated_before,
            allocated_after=torch.cuda.memory_allocated(),
            allocated_peak=torch.cuda.max_memory_allocated(),
            reserved_after=reserved,
            reserved_peak=torch.cuda.max_memory_reserved(),
            device_used_after=total - free,
            outside_after=outside,
        )
