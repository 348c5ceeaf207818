"""What a strategy that releases through the driver (``tms``) moved, on fake readings: the
fall in the driver's used bytes, less what PyTorch's caching allocator gave back meanwhile
(``empty_cache`` inside the offload is not the strategy's release). PyTorch's reserved
growth is never credited: a ``MemPool`` over a pluggable allocator reserves bytes no
device memory backs, so crediting it confirms releases that never happened. On the H200,
tms's offloads never grew PyTorch's reserved bytes (0 in later cycles, negative in the
first: ``benchmarks/results/h200x2-2026-11-30-compare-tms-5gib.json``)."""

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


def test_the_release_is_the_used_bytes_fall_when_pytorch_reserved_nothing():
    train = _rec("train", used=2000 * MiB, reserved=1400 * MiB)
    offload = _rec("offload", used=1400 * MiB, reserved=1400 * MiB)  # 600 MiB paused
    assert transfers.released_outside_pytorch(train.gpu, offload.gpu) == 600 * MiB
    claimed = torch.UntypedStorage(590 * MiB, device="meta")  # the size, no memory
    strategy = _Releasing([claimed])
    assert transfers.driver_delta(strategy, train, offload) == 600 * MiB
    assert transfers.confirmed_released(strategy, [], [train, offload]) == {claimed._cdata}


def test_reserved_bytes_no_device_memory_backs_confirm_no_release():
    """The strategy left param_data where it was and allocated 600 MiB in a ``MemPool``
    whose pluggable allocator is libc's ``malloc`` (or paused a torch_memory_saver region
    it made in the same phase): PyTorch reserved 600 MiB more, the driver gave nothing."""
    train = _rec("train", used=2000 * MiB, reserved=1400 * MiB)
    offload = _rec("offload", used=2000 * MiB, reserved=2000 * MiB)
    assert transfers.released_outside_pytorch(train.gpu, offload.gpu) == 0
    claimed = torch.UntypedStorage(590 * MiB, device="meta")
    strategy = _Releasing([claimed])
    assert transfers.driver_delta(strategy, train, offload) == 0
    assert transfers.confirmed_released(strategy, [], [train, offload]) == frozenset()


def test_a_block_pytorch_cached_during_the_offload_is_not_credited():
    """The same readings as a pool reserving 200 MiB of nothing beside a 400 MiB release:
    what the driver saw fall (400 MiB) is all that counts, under 0.97 of the 590 claimed."""
    train = _rec("train", used=2000 * MiB, reserved=1400 * MiB)
    offload = _rec("offload", used=1600 * MiB, reserved=1600 * MiB)
    assert transfers.released_outside_pytorch(train.gpu, offload.gpu) == 400 * MiB
    strategy = _Releasing([torch.UntypedStorage(590 * MiB, device="meta")])
    assert transfers.confirmed_released(strategy, [], [train, offload]) == frozenset()


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


def test_reserved_bytes_falling_without_the_driver_do_not_inflate_a_load():
    """The load resumed 600 MiB and freed the 600 MiB segment a pluggable allocator had
    reserved with no device memory behind it: the driver handed out 600 MiB, not 1200."""
    offload = _rec("offload", used=1000 * MiB, reserved=1400 * MiB)
    load = _rec("load", used=1600 * MiB, reserved=800 * MiB)
    assert transfers.driver_delta(_Releasing([]), offload, load) == 600 * MiB
    assert transfers.taken_outside_pytorch(offload.gpu, load.gpu) == 600 * MiB
