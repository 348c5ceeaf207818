"""The content search (``engine/model/param_copies.py``) on host tensors: a copy of the
parameters' bytes is found, and measured, wherever and however it lies; nothing else is.

Every region is an ordinary host tensor read through a storage over its address, as CUDA
blocks are read from the allocator's snapshot. The truth is the bytes each test copied."""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.model import device_regions as dr
from offloadprobe.engine.model import param_copies as pc

MiB = 2**20
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def params() -> torch.Tensor:
    """A 4 MiB bf16 param_data: random weights, a zero bias block, a block of ones."""
    gen = torch.Generator().manual_seed(0)
    data = torch.randn(2 * MiB, generator=gen).to(torch.bfloat16)
    data[:4096] = 0
    data[4096:8192] = 1
    return data


@pytest.fixture(scope="module")
def anchors(params) -> pc.Anchors:
    found = pc.take_anchors([params], 100 * MiB)
    assert found is not None
    return found


def _region(tensor: torch.Tensor) -> dr.Region:
    return dr.Region(*dr.storage_range(tensor), CPU)


def _raw(params: torch.Tensor) -> torch.Tensor:
    return params.view(torch.uint8)


def test_equal_words_are_no_anchors_and_the_rest_are_the_grid(anchors, params):
    assert anchors.spacing == 64  # 4 MiB over 65,536 anchors
    kept = anchors.kept(0)
    grid = params.numel() * 2 // 64
    assert grid - 2 * 8192 * 2 // 64 - 8 <= kept < grid  # the zeros' and ones' words go


@pytest.mark.parametrize("offset", [0, 1, 7, 12345])
@pytest.mark.parametrize("share", [1.0, 0.49, 1 / 16])
def test_a_copy_at_any_byte_offset_is_found_and_measured(anchors, params, offset, share):
    size = params.numel() * 2
    n = int(size * share)
    start = min(20000, size - n)  # past the zeros and ones, but where it is the whole
    region = torch.randint(0, 256, (n + 3 * MiB,), dtype=torch.uint8)
    region[offset : offset + n] = _raw(params)[start : start + n]
    (found,) = pc.find(anchors, [_region(region)]).values()
    assert abs(found - n) <= 2 * anchors.spacing + n // 100, (found, n)


def test_a_copy_in_many_small_pieces_is_measured_by_the_samples(anchors, params):
    piece, total = 4096, params.numel() * 2 // 2
    region = torch.zeros(4 * total, dtype=torch.uint8)
    for k in range(0, total, piece):  # every other 4 KiB of the first half, 3 bytes off
        region[2 * k + 3 : 2 * k + 3 + piece] = _raw(params)[k : k + piece]
    # 256 samples meet it: the estimate's deviation is about 6%
    (found,) = pc.find(anchors, [_region(region)]).values()
    assert 0.75 * total <= found <= 1.25 * total, (found, total)


def test_what_is_not_the_same_bytes_is_not_found(anchors, params):
    others = [
        params.float(),  # the fp32 master weights of the same values
        (params.view(torch.int16) ^ 0x5A5A),  # an encoded copy
        torch.ones(4 * MiB, dtype=torch.uint8),
        torch.zeros(4 * MiB, dtype=torch.uint8),
        torch.randn(MiB),
    ]
    assert pc.find(anchors, [_region(t) for t in others]) == {}


def test_excluded_storages_are_not_read(anchors, params):
    copy = params.clone()
    assert pc.find(anchors, [_region(copy)], exclude=[dr.storage_range(copy)]) == {}
    assert pc.find(anchors, [_region(copy)])  # the same region, not excluded


def test_the_anchors_check_themselves_on_the_buffers(params):
    """take_anchors finds each buffer where it is first: a blind search fails loudly."""
    assert pc.take_anchors([torch.zeros(MiB, dtype=torch.bfloat16)], MiB) is None
    two = [params, params[: MiB // 2].clone().flip(0)]
    found = pc.take_anchors(two, 100 * MiB)
    assert found is not None and len(found.sizes) == 2
    region = torch.cat([_raw(two[1]), _raw(two[0])[:MiB]])
    (measured,) = pc.find(found, [_region(region)]).values()
    assert abs(measured - (MiB + MiB)) <= 4 * found.spacing + 2 * MiB // 100


def test_cuda_regions_are_the_default_pool_s_active_blocks():
    """A ``torch.cuda.memory_snapshot()`` as PyTorch writes it: blocks in order from the
    segment's address (older versions give no block address)."""
    snapshot = [
        {
            "device": 0,
            "address": 1000,
            "segment_pool_id": (0, 0),
            "blocks": [
                {"size": 100, "state": "active_allocated"},
                {"size": 50, "state": "inactive"},
                {"size": 30, "state": "active_allocated", "address": 1150},
                # its rounding beyond the 700 bytes asked for holds stale bytes: not read
                {"size": 1024, "requested_size": 700, "state": "active_allocated"},
            ],
        },
        {"device": 0, "address": 5000, "segment_pool_id": (1, 2), "blocks": []},
        {"device": 1, "address": 9000, "blocks": [{"size": 8, "state": "active_allocated"}]},
        {
            "device": 0,
            "address": 7000,
            "segment_pool_id": (3, 0),  # a MemPool's: its addresses need not be mapped
            "blocks": [{"size": 64, "state": "active_allocated"}],
        },
    ]
    regions = dr.cuda_regions(snapshot, 0)
    assert [(r.address, r.nbytes) for r in regions] == [(1000, 100), (1150, 30), (1180, 700)]


def test_anchors_whose_every_word_still_reads_the_same_are_kept(anchors, params):
    assert pc.take_anchors([params], 100 * MiB, anchors) is anchors
    trained = params * 1.5  # every word changes: new anchors, and they find the new bytes
    fresh = pc.take_anchors([trained], 100 * MiB, anchors)
    assert fresh is not None and fresh is not anchors
    copy = trained.clone()  # alive while it is read: a region is only an address
    (found,) = pc.find(fresh, [_region(copy)]).values()
    assert found == trained.numel() * 2


def test_a_view_off_the_8_byte_grid_is_anchored_and_found_where_it_is():
    """A float32 view 4 bytes into its storage (a strategy's packed flat buffer): anchoring
    it raised (a byte view at offset 4 cannot be read as int64 words); it is read from its
    first aligned word, and the search still finds it whole where it lies."""
    flat = torch.randn(MiB // 4 + 1, generator=torch.Generator().manual_seed(3))
    view = flat[1:]
    found = pc.take_anchors([view], 100 * MiB)  # checks itself: BlindSearch if not found
    assert found is not None and found.sizes == (MiB - 8,)
