"""``engine/model/prior_regions.py``: an allocation from before the build is left out of
the content search only while it is the same allocation holding the same bytes. Regions
are host tensors read through a storage over their address, as in test_param_copies."""

from __future__ import annotations

import torch

from offloadprobe.engine.model import device_regions as dr
from offloadprobe.engine.model import prior_regions

CPU = torch.device("cpu")


def test_only_unchanged_allocations_from_before_are_left_out(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    twin, other, later = (torch.randn(4096, generator=gen) for _ in range(3))
    regions = [dr.Region(*dr.storage_range(t), CPU) for t in (twin, other)]
    monkeypatch.setattr(prior_regions, "regions_of", lambda runtime: list(regions))
    before = prior_regions.PriorRegions.take(None)
    assert len(before.digests) == 2
    regions.append(dr.Region(*dr.storage_range(later), CPU))  # made after: never left out
    assert sorted(before.unchanged(None)) == sorted((r.address, r.nbytes) for r in regions[:2])
    other[1000:1008] = later[:8]  # one word written into an old allocation: searched again
    assert before.unchanged(None) == [dr.storage_range(twin)]
    # two words changed, anywhere, change the digests too
    twin[:2] = twin[:2].flip(0).clone() + 1
    assert before.unchanged(None) == []


def test_in_cpu_emulation_another_storage_at_the_same_address_is_searched(monkeypatch):
    """A twin's storage freed and the measured model's made at its address and size with
    the same bytes: not the same allocation (the registry's storage objects differ)."""
    twin = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    address, nbytes = dr.storage_range(twin)
    held = [twin.untyped_storage()]
    memory = type("Memory", (), {"storages": lambda self: list(held)})()
    runtime = type("Runtime", (), {"device_memory": memory})()
    monkeypatch.setattr(prior_regions, "regions_of", lambda r: [dr.Region(address, nbytes, CPU)])
    before = prior_regions.PriorRegions.take(runtime)
    assert before.unchanged(runtime) == [(address, nbytes)]
    # another storage object at the very address, size and bytes
    held[:] = [torch._C._construct_storage_from_data_pointer(address, CPU, nbytes)]
    assert held[0]._cdata != twin.untyped_storage()._cdata
    assert before.unchanged(runtime) == []
