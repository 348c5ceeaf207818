"""The fingerprint of bytes on the GPU equals the fingerprint of the same bytes on the host.

A run fingerprints device buffers on the device (element-wise products) and host tensors
on the host (int64 ``mv``/``dot``); either may be compared with the other. Skipped
without a GPU.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.model.integrity import BLOCK, FingerprintKey, fingerprint

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize(
    ("numel", "dtype"),
    [(1, torch.bfloat16), (1001, torch.int16), (4 * BLOCK, torch.bfloat16),
     (4 * BLOCK * 3 + 7, torch.bfloat16), (BLOCK * 5 + 3, torch.float32),
     (BLOCK * 40 + 123, torch.float32), (BLOCK // 2 + 1, torch.uint8)],
)  # fmt: skip
def test_host_and_device_fingerprints_of_the_same_bytes_agree(numel, dtype):
    key = FingerprintKey()
    gen = torch.Generator(device="cuda").manual_seed(numel)
    words = torch.randint(-(1 << 62), 1 << 62, ((numel * dtype.itemsize + 7) // 8,),
                          generator=gen, dtype=torch.int64, device="cuda")  # fmt: skip
    device = words.view(torch.uint8)[: numel * dtype.itemsize].view(dtype)
    for host in (device.cpu(), device.to("cpu", non_blocking=True)):  # pageable and pinned
        torch.cuda.synchronize()
        assert fingerprint(host, key) == fingerprint(device, key)
    offset = device[3:]  # a view at an odd offset: read through a copy on both sides
    assert fingerprint(offset.cpu(), key) == fingerprint(offset, key)
