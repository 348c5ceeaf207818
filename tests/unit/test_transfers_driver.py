"""What a strategy that releases through the driver (``tms``) moved, on fake readings: the
fall in the driver's used bytes, corrected by what PyTorch's caching allocator reserved
or gave back meanwhile (seen on the H200: a block cached during the offload read as a
release that never happened, and 600 MiB of paused ``param_data`` as still on device)."""

from dataclasses import replace

import torch

from offloadprobe.core.readings import GpuReading
from offloadprobe.engine import transfers
from tests.fakes import _phase

MiB = 2**20


def _gpu(used: int, reserved: int) -> GpuReading:
    return GpuReading(
        allocated_before=0,
        allocated_after=0,
        allocated_peak=0,
        reserved_after=reserved,
        reserved_peak=reserved,
        device_used_after=used,
    )


def _rec(name: str, used: int, reserved: int, cycle: int = 1):
    rec = _phase(cycle, name, before=0, after=0, peak=0, moved=0)
    return replace(rec, gpu=_gpu(used, reserved))


class _Releasing:
    """Says it released ``storages`` through the driver (``ReleasesThroughDriver``)."""

    def __init__(self, storages):
        self.storages = storages

    def released_storages(self, models):
        return self.storages


def test_a_block_cached_during_the_offload_does_not_hide_the_release():
    train = _rec("train", used=2000 * MiB, reserved=1400 * MiB)
    # the pause gave 600 MiB back; PyTorch cached 200 MiB more meanwhile
    offload = _rec("offload", used=1600 * MiB, reserved=1600 * MiB)
    assert transfers.released_outside_pytorch(train.gpu, offload.gpu) == 600 * MiB
    claimed = torch.UntypedStorage(590 * MiB, device="meta")  # the size, no memory
    strategy = _Releasing([claimed])
    assert transfers.driver_delta(strategy, train, offload) == 600 * MiB
    # the used bytes alone fell by 400 MiB: under CONFIRMED of the 590 MiB claimed
    assert transfers.confirmed_released(strategy, [], [train, offload]) == {claimed._cdata}


def test_memory_pytorch_handed_back_is_not_counted_as_the_strategys_release():
    train = _rec("train", used=2000 * MiB, reserved=1400 * MiB)
    # empty_cache gave 500 MiB of PyTorch's own back; the strategy released nothing
    offload = _rec("offload", used=1500 * MiB, reserved=900 * MiB)
    assert transfers.released_outside_pytorch(train.gpu, offload.gpu) == 0
    strategy = _Releasing([torch.UntypedStorage(400 * MiB, device="meta")])
    assert transfers.driver_delta(strategy, train, offload) == 0
    assert transfers.confirmed_released(strategy, [], [train, offload]) == frozenset()


def test_a_load_counts_what_the_driver_handed_out_beside_pytorchs_growth():
    offload = _rec("offload", used=1000 * MiB, reserved=800 * MiB)
    load = _rec("load", used=1700 * MiB, reserved=900 * MiB)  # 600 resumed, 100 cached
    strategy = _Releasing([])
    assert transfers.driver_delta(strategy, offload, load) == 600 * MiB
    assert transfers.driver_delta(object(), offload, load) is None  # not a driver strategy
