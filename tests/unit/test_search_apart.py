"""The content search run apart (``engine/model/search_apart.py``): the same answers as
in the process, from children that leave the measured process's memory as it was."""

from __future__ import annotations

import os

import pytest
import torch

from offloadprobe.engine.model import param_copies as pc
from offloadprobe.engine.model.device_regions import Region
from offloadprobe.engine.model.search_apart import (
    AnchorStore,
    ApartSearch,
    InProcessSearch,
    in_child,
)

MiB = 2**20


def _region(t: torch.Tensor) -> Region:
    return Region(t.data_ptr(), t.numel() * t.element_size(), torch.device("cpu"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def params() -> torch.Tensor:
    return torch.randn(MiB, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)


def test_apart_finds_what_the_search_in_the_process_finds(params):
    copy = torch.empty(3 * MiB, dtype=torch.uint8)
    copy[1000 : 1000 + 2 * MiB] = params.view(torch.uint8)  # at an odd offset
    noise = torch.randn(MiB)
    regions = [_region(copy), _region(noise)]
    found = []
    for search in (InProcessSearch(), ApartSearch.made([params], 100 * MiB)):
        assert search.take([params], 100 * MiB)
        found.append(search.find(regions, []))
    (inside,), (apart,) = (f.values() for f in found)
    assert set(found[1]) == {copy.data_ptr()}
    assert abs(apart - 2 * MiB) < 2 * MiB // 50 and abs(apart - inside) < 2 * MiB // 50


def test_excluded_and_kept_regions_are_not_searched(params):
    copy = params.clone()
    search = ApartSearch.made([params], 100 * MiB)
    assert search.take([params], 100 * MiB)
    region = _region(copy)
    assert search.find([region], [(region.address, region.nbytes)]) == {}
    assert search.find([region], [], lambda: [(region.address, region.nbytes)]) == {}
    assert search.find([region], [])  # the same region, left in


def test_new_anchors_after_the_bytes_changed_find_the_new_bytes(params):
    search = ApartSearch.made([params], 100 * MiB)
    assert search.take([params], 100 * MiB)
    old = params.clone()
    params.mul_(1.5)
    assert search.take([params], 100 * MiB)
    assert search.find([_region(old)], []) == {}
    new = params.clone()
    assert search.find([_region(new)], [])


def test_nothing_to_anchor_is_no_search():
    search = ApartSearch.made([torch.zeros(MiB, dtype=torch.bfloat16)], MiB)
    assert search.take([torch.zeros(MiB, dtype=torch.bfloat16)], MiB) is False
    other = torch.randn(1000)
    assert search.find([_region(other)], []) == {}


def test_the_store_keeps_the_anchors_as_taken(params):
    anchors = pc.take_anchors([params, params[: MiB // 2].clone()], 100 * MiB)
    assert anchors is not None
    store = AnchorStore(anchors.values.numel())
    store.write(anchors)
    back = store.read()
    assert back is not None
    assert back.starts == anchors.starts and back.sizes == anchors.sizes
    assert back.spacing == anchors.spacing
    assert torch.equal(back.positions, anchors.positions)
    assert torch.equal(back.values, anchors.values)
    assert torch.equal(back.sorted_values, anchors.sorted_values)
    assert torch.equal(back.sorted_buffer, anchors.sorted_buffer)
    store.write(None)
    assert store.read() is None


def test_a_childs_error_is_raised_in_the_parent():
    def fails() -> None:
        raise ValueError("in the child")

    with pytest.raises(ValueError, match="in the child"):
        in_child(fails)
    assert in_child(os.getpid) != os.getpid()  # it ran elsewhere


def _growth(search, params, regions) -> int:
    """This process's RSS grown over the searches of six cycles, each after its take."""
    search.take([params], 40 * MiB)
    search.find(regions, [])
    grown = 0
    for _ in range(6):
        params.add_(0.01)
        assert search.take([params], 40 * MiB)
        before = _rss()
        search.find(regions, [])
        grown += _rss() - before
    return grown


def test_the_measured_process_keeps_none_of_the_searchs_memory(params):
    """The truth: this process's RSS across each search (in the process, glibc kept
    some of the sampling's temporaries' pages: megabytes over six cycles)."""
    tensors = [torch.randn(n) for n in (300_000, 50_000, 1_000_000, 20_000)]
    regions = [_region(t) for t in tensors]
    assert _growth(ApartSearch.made([params], 40 * MiB), params, regions) < MiB // 4
