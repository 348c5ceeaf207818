"""``cpu_offload_pinned``: FSDP2's ``CPUOffloadPolicy(pin_memory=True)``, a build-time
policy (see ``build.py``): offload and load move nothing, the shards, gradients and AdamW
state live in host memory through the whole job, the shards and gradients pinned. FSDP2
pins each padded shard with ``Tensor.pin_memory()``, a block of PyTorch's caching host
allocator rounded up to a power of two, and re-pins after ``reset_sharded_param``.
"""

from __future__ import annotations

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.build import FsdpBuild, PolicyKeepsHost

BUILD = FsdpBuild(cpu_offload="pinned")


class CpuOffloadPinned(PolicyKeepsHost):
    """The model lives on the host by ``CPUOffloadPolicy(pin_memory=True)``."""

    pin_memory = True


STRATEGY = ModelStrategyInfo(  # built with BUILD
    engines=("fsdp2",),
    moves_params=False,  # the policy keeps them on the host all the time
    name="cpu_offload_pinned",
    summary="CPUOffloadPolicy(pin_memory=True): pinned host shards",
    factory=CpuOffloadPinned,
    emulation="built with pin_memory=False (no pinned memory without CUDA), said so",
)
