"""The phase between offload and load: another engine claims device memory.

In an RL loop the rollout engine (vLLM, SGLang) takes the GPU memory an offload
freed. Claiming ``n`` bytes here shows whether what the strategy left behind
still lets it fit. On CUDA the allocation is real and may raise PyTorch's OOM
under ``--gpu-limit``; in CPU emulation there is no device to fill, so the claim
is judged against the emulated device bytes still resident, and says so.
"""

from __future__ import annotations

import torch

from offloadprobe.core.errors import DeviceOutOfMemory
from offloadprobe.core.units import format_bytes
from offloadprobe.engine.runtime import Runtime


def limit_device_memory(runtime: Runtime, limit_bytes: int | None) -> None:
    """Cap this process's CUDA caching allocator at ``limit_bytes`` (no-op in emulation)."""
    if limit_bytes is None or runtime.emulated:
        return
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total))


def claim(runtime: Runtime, nbytes: int, *, resident: int, limit: int | None) -> None:
    """Allocate and touch ``nbytes`` on the device, then free them."""
    if runtime.emulated:
        if limit is not None and resident + nbytes > limit:
            raise DeviceOutOfMemory(
                f"judged in CPU emulation: {format_bytes(resident)} still resident + rollout "
                f"claim {format_bytes(nbytes)} > GPU limit {format_bytes(limit)}"
            )
        return
    try:
        block = torch.empty(nbytes, dtype=torch.uint8, device=runtime.device)
        block.fill_(1)
        del block
    except torch.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0]
        raise DeviceOutOfMemory(
            f"CUDA out of memory claiming {format_bytes(nbytes)}: {first}"
        ) from None
