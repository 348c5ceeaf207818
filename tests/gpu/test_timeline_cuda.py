"""The sampler's CUDA counters on a real GPU (skipped without one)."""

from __future__ import annotations

import time

import pytest
import torch

from offloadprobe.measure.sampler import sampler_for

pytestmark = pytest.mark.cuda
GiB = 1 << 30


def test_cuda_series_draw_a_one_gib_allocation_and_a_pinned_block():
    torch.cuda.init()
    sampler = sampler_for(cuda=True).start()
    time.sleep(0.05)
    block = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    pinned = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    torch.cuda.synchronize()
    time.sleep(0.2)
    del block, pinned
    torch.cuda.synchronize()
    time.sleep(0.05)
    timeline = sampler.stop()
    allocated = timeline.get("gpu.allocated")
    assert max(allocated.values) - allocated.values[0] >= GiB
    assert max(timeline.get("gpu.device_used").values) >= GiB
    assert max(timeline.get("pinned.reserved").values) >= 256 << 20
    assert max(timeline.get("host.shmem").values) >= 0
    assert list(allocated.times_ns) == sorted(allocated.times_ns)
