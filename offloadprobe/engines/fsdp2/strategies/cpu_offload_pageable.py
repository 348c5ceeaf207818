"""``cpu_offload_pageable``: FSDP2's ``CPUOffloadPolicy(pin_memory=False)``, a build-time
policy (see ``build.py``): offload and load move nothing; the shards, gradients and AdamW
state live in pageable host memory through the whole job, and every host-to-device copy
before an all-gather goes through a staging copy of CUDA's own.
"""

from __future__ import annotations

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.build import FsdpBuild, PolicyKeepsHost

BUILD = FsdpBuild(cpu_offload="pageable")


class CpuOffloadPageable(PolicyKeepsHost):
    """The model lives on the host by ``CPUOffloadPolicy(pin_memory=False)``."""

    pin_memory = False


STRATEGY = ModelStrategyInfo(  # built with BUILD
    engines=("fsdp2",),
    moves_params=False,  # the policy keeps them on the host all the time
    name="cpu_offload_pageable",
    summary="CPUOffloadPolicy(pin_memory=False): pageable host shards",
    factory=CpuOffloadPageable,
    emulation="as on a GPU: the policy's host tensors are ordinary host memory",
)
