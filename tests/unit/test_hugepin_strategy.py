"""``hugepin`` and ``relock`` on fake DDP buffers in this process: bit-exact round trips,
exact host mappings that stay (hugepin) or go after every load (relock), one copy per
registered range, registered bytes, and the note when huge pages are refused."""

import errno
import os
import threading
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from offloadprobe.engine import hostmem
from offloadprobe.engine import hugepin_pipeline as hugepin
from offloadprobe.engine.hugepin_pipeline import HugePinStrategy, Settings, Step, plan
from offloadprobe.engine.hugepin_settings import cpu_siblings, placement
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies import model_strategy

CPU = Runtime(device="cpu", emulated=True, note=None)
MIB = 2**20
CHUNK = MIB


def _buffer(numel, seed):
    gen = torch.Generator().manual_seed(seed)
    return SimpleNamespace(
        param_data=torch.randn(numel, generator=gen).to(torch.bfloat16),
        grad_data=torch.ones(numel),
    )


def _models():
    """A dense buffer over several chunks (the last short) and an expert-parallel one."""
    dense, expert = _buffer(3 * MIB // 2 + 7, 1), _buffer(MIB // 4 + 3, 2)
    chunk = SimpleNamespace(buffers=[dense], expert_parallel_buffers=[expert])
    return [chunk], [dense, expert]


class FakeCudart:
    """Records every range registered and unregistered (no CUDA)."""

    def __init__(self):
        self.registered, self.unregistered = [], []

    def register(self, address, nbytes):
        self.registered.append((address, nbytes))

    def unregister(self, address):
        self.unregistered.append(address)


def _strategy(ephemeral, cudart=None, threads=2, registrars=1, touch_first=False):
    settings = Settings(
        threads=threads, chunk_bytes=CHUNK, registrars=registrars, touch_first=touch_first
    )
    return HugePinStrategy(CPU, ephemeral=ephemeral, settings=settings, cudart=cudart)


def _resident(strategy):
    return [
        hostmem.resident_bytes(c.mapping.address, c.mapping.length)
        for c in strategy.copies.values()
    ]


@pytest.mark.parametrize("ephemeral", [False, True])
def test_round_trips_are_bit_exact_and_the_host_holds_what_it_promises(ephemeral):
    models, buffers = _models()
    originals = [b.param_data.clone() for b in buffers]
    strategy = _strategy(ephemeral)
    try:
        for _ in range(2):
            strategy.offload(models)
            assert all(b.param_data.untyped_storage().nbytes() == 0 for b in buffers)
            assert all(b.grad_data.untyped_storage().nbytes() == 0 for b in buffers)
            lengths = [c.mapping.length for c in strategy.copies.values()]
            assert _resident(strategy) == lengths  # exactly the payload, page-rounded
            strategy.load(models)
            for b, original in zip(buffers, originals, strict=True):
                assert torch.equal(b.param_data, original)
                assert not b.grad_data.any()
            assert _resident(strategy) == ([0, 0] if ephemeral else lengths)
        for c, b in zip(strategy.copies.values(), buffers, strict=True):
            assert c.mapping.nbytes == b.param_data.numel() * 2
            assert c.mapping.length - c.mapping.nbytes < hostmem.PAGE
        assert strategy.registered_bytes == 0  # CPU emulation locks nothing
    finally:
        strategy.close()
    assert strategy.copies == {}


def test_the_planner_gives_each_registered_range_exactly_one_copy():
    chunks = [hostmem.plan_chunks(5 * MIB // 2 + 1, CHUNK), hostmem.plan_chunks(MIB, CHUNK)]
    steps = plan(chunks, [[False, True, False], [False]])
    assert steps == [
        Step(copy=0, chunk=0, offset=0, nbytes=CHUNK, lock=True),
        Step(copy=0, chunk=1, offset=CHUNK, nbytes=CHUNK, lock=False),
        Step(copy=0, chunk=2, offset=2 * CHUNK, nbytes=MIB // 2 + 1, lock=True),
        Step(copy=1, chunk=0, offset=0, nbytes=MIB, lock=True),
    ]
    assert all(s.offset % CHUNK == 0 and s.nbytes <= CHUNK for s in steps)


@pytest.mark.parametrize(
    ("ephemeral", "registrars", "touch_first"), [(False, 1, 0), (True, 1, 0), (True, 3, 1)]
)
def test_every_copy_stays_within_one_registered_range(
    monkeypatch, ephemeral, registrars, touch_first
):
    models, buffers = _models()
    payload = sum(b.param_data.numel() * 2 for b in buffers)
    cudart = FakeCudart()
    strategy = _strategy(ephemeral, cudart, registrars=registrars, touch_first=bool(touch_first))
    offload_copies = []
    real_copy = strategy._copy

    def copy(dst, src):
        offload_copies.append((dst.data_ptr(), dst.numel()))  # host side: the destination
        real_copy(dst, src)

    try:
        locked_first = None
        for cycle in range(2):
            cudart.registered[:], cudart.unregistered[:], offload_copies[:] = [], [], []
            with monkeypatch.context() as m:
                m.setattr(strategy, "_copy", copy)
                strategy.offload(models)
            ranges = sorted(cudart.registered)
            locked_first = locked_first or ranges
            assert sorted(offload_copies) == locked_first  # one copy per registered range
            if cycle == 0 or ephemeral:
                assert sum(n for _, n in ranges) == payload
            else:
                assert ranges == []  # hugepin keeps its ranges locked
            assert strategy.registered_bytes == payload
            strategy.load(models)
            assert strategy.locked_bytes == (0 if ephemeral else payload)
            assert strategy.registered_bytes == payload  # as the last offload left it
            unregistered = sorted(cudart.unregistered)
            assert unregistered == ([a for a, _ in locked_first] if ephemeral else [])
    finally:
        strategy.close()
    assert strategy.locked_bytes == 0 and strategy.registered_bytes == 0


def test_a_refused_huge_page_advice_is_said_in_the_notes(monkeypatch):
    real = hostmem.madvise
    monkeypatch.setattr(hostmem, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(
        hostmem,
        "madvise",
        lambda a, n, advice: (
            errno.EINVAL if advice == hostmem.MADV_HUGEPAGE else real(a, n, advice)
        ),
    )
    models, buffers = _models()
    original = buffers[0].param_data.clone()
    strategy = _strategy(ephemeral=True)
    try:
        strategy.offload(models)
        strategy.load(models)
        assert torch.equal(buffers[0].param_data, original)
        assert all(c.mapping.huge_bytes == 0 for c in strategy.copies.values())
    finally:
        strategy.close()
    assert any("4 KiB pages" in n and "refused madvise(MADV_HUGEPAGE)" in n for n in strategy.notes)
    monkeypatch.setattr(hostmem, "madvise", real)
    granted = _strategy(ephemeral=False)
    granted.offload(models)
    granted.load(models)
    granted.close()
    assert not [n for n in granted.notes if "MADV_HUGEPAGE" in n]  # granted: silent


def test_settings_follow_the_cpus_and_the_strategy_options(monkeypatch):
    monkeypatch.setattr(hostmem, "available_cpus", lambda: 16)
    assert Settings.from_options({}, local_ranks=1).threads == 12
    assert Settings.from_options({}, local_ranks=2).threads == 5
    options = {"threads": "3", "chunk_mib": "3", "huge_pages": "0", "touch": "memset"}
    s = Settings.from_options(options | {"registrars": "2", "touch_first": "1"}, local_ranks=1)
    assert (s.threads, s.registrars, s.huge_pages, s.touch) == (3, 2, False, "memset")
    assert s.touch_first
    default = Settings.from_options({}, local_ranks=1)
    assert default.registrars == 1 and not default.touch_first and default.touch == "memset"
    assert default.first_chunk_bytes == hugepin.FIRST_CHUNK_MIB * MIB
    assert Settings.from_options({"first_chunk_mib": "0"}).first_chunk_bytes is None
    assert Settings.from_options({"first_chunk_mib": "64"}).first_chunk_bytes is None
    assert s.chunk_bytes % hostmem.huge_page_size() == 0 and s.chunk_bytes >= 3 * MIB
    assert Settings.from_options({}, local_ranks=1).chunk_bytes == hugepin.CHUNK_MIB * MIB
    with pytest.raises(Exception, match="touch"):
        Settings.from_options({"touch": "sometimes"})
    with pytest.raises(Exception, match=r"touch_first='sometimes': choose 1 or 0"):
        Settings.from_options({"touch_first": "sometimes"})
    assert not Settings.from_options({"huge_pages": "False"}).huge_pages
    assert Settings.from_options({"register_core": "1"}).register_core
    assert not default.register_core
    with pytest.raises(Exception, match="take threads"):
        Settings.from_options({"thread": "3"})


def test_register_core_takes_whole_cores_from_the_end_and_leaves_their_siblings_out():
    pairs = {c: {c % 4, c % 4 + 4} for c in range(8)}  # 4 cores, 2 threads each
    assert placement(set(range(8)), pairs, 1) == ([3], {0, 1, 2, 4, 5, 6})
    assert placement(set(range(8)), pairs, 2) == ([2, 3], {0, 1, 4, 5})
    assert placement({0, 4}, pairs, 1) is None  # one core: nothing to keep apart
    assert placement({0, 1, 4}, pairs, 1) == ([1], {0, 4})  # a sibling outside the mask
    assert placement({0, 1}, {}, 1) == ([1], {0})  # unknown topology: a CPU is a core


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to place")
def test_register_core_binds_the_pool_threads_as_the_kernel_reports_them():
    cpus = os.sched_getaffinity(0)
    chosen, others = placement(cpus, cpu_siblings(cpus), 1)
    settings = Settings(threads=2, chunk_bytes=CHUNK, register_core=True)
    strategy = HugePinStrategy(CPU, settings=settings, cudart=FakeCudart())
    models, buffers = _models()
    original = buffers[0].param_data.clone()
    try:  # the kernel's own view of each thread's mask, from inside the thread
        both = threading.Barrier(2)  # each of the two touch threads answers once

        def mask():
            both.wait()
            return frozenset(os.sched_getaffinity(0))

        assert {f.result() for f in [strategy._pool.submit(mask) for _ in range(2)]} == {
            frozenset(others)
        }
        assert strategy._serial.submit(os.sched_getaffinity, 0).result() == set(chosen)
        assert os.sched_getaffinity(0) == cpus  # the calling thread is left alone
        assert any("registering on CPU" in n for n in strategy.notes)
        strategy.offload(models)
        strategy.load(models)
        assert torch.equal(buffers[0].param_data, original)
    finally:
        strategy.close()


def test_both_are_registered_strategies():
    assert model_strategy("hugepin").name == "hugepin"
    relock = model_strategy("relock")
    strategy = relock.build(CPU)
    try:
        assert strategy.ephemeral and isinstance(strategy, HugePinStrategy)
    finally:
        strategy.close()


def _reference(seed):
    """A chunk that is not DDP-wrapped (a reference model): every parameter is loose."""
    torch.manual_seed(seed)
    module = torch.nn.Linear(1024, 700).to(torch.bfloat16)  # weight over two chunks, bias tiny
    module.requires_grad_(False)
    return module


@pytest.mark.parametrize("ephemeral", [False, True])
def test_parameters_outside_the_buffers_go_through_the_same_pipeline(ephemeral):
    models, buffers = _models()
    reference = _reference(3)
    models.append(reference)
    loose = list(reference.parameters())
    originals = [p.detach().clone() for p in loose]
    payload = sum(b.param_data.numel() * 2 for b in buffers) + sum(p.numel() * 2 for p in loose)
    cudart = FakeCudart()
    strategy = _strategy(ephemeral, cudart)
    try:
        for cycle in range(2):
            strategy.offload(models)
            assert all(p.untyped_storage().nbytes() == 0 for p in loose)
            assert len(strategy.copies) == len(buffers) + len(loose)  # one mapping a source
            if cycle == 0 or ephemeral:  # every byte page-locked, the parameters' too
                assert sum(n for _, n in cudart.registered) == payload
            assert strategy.registered_bytes == payload
            lengths = [c.mapping.length for c in strategy.copies.values()]
            assert _resident(strategy) == lengths
            strategy.load(models)
            for p, original in zip(loose, originals, strict=True):
                assert torch.equal(p, original)
            # relock hands every page back, the parameters' included: none held while training
            assert _resident(strategy) == ([0] * len(lengths) if ephemeral else lengths)
            assert strategy.locked_bytes == (0 if ephemeral else payload)
            cudart.registered.clear()
    finally:
        strategy.close()


def test_touch_first_faults_in_every_chunk_before_the_first_registration():
    models, _ = _models()
    seen = []

    class Watching(FakeCudart):
        def register(self, address, nbytes):
            seen.append(sum(_resident(strategy)))
            super().register(address, nbytes)

    strategy = _strategy(ephemeral=True, cudart=Watching(), touch_first=True)
    try:
        for _ in range(2):  # relock: every offload touches and registers again
            seen.clear()
            strategy.offload(models)
            lengths = sum(c.mapping.length for c in strategy.copies.values())
            assert len(seen) > 2 and seen == [lengths] * len(seen)
            strategy.load(models)
    finally:
        strategy.close()


class _SlowCopyEvent:
    """``torch.cuda.Event`` stand-in: the first chunk's load copy completes 0.2 s late."""

    slow: ClassVar[list[bool]] = []

    def record(self):
        pass

    def synchronize(self):
        if self.slow and self.slow.pop():
            time.sleep(0.2)


def test_close_after_a_failed_load_waits_for_the_chunks_still_going_back(monkeypatch):
    """On CUDA each chunk of a load goes back (unregister, ``MADV_DONTNEED``) on the
    registering thread once its copy completed; a load that fails part-way (the next
    buffer's restore out of memory) leaves those in flight, and ``close()`` must not unmap
    a mapping under them (a ``madvise`` on an address since mapped again zeroes it)."""
    models, _ = _models()
    cudart = FakeCudart()
    strategy = _strategy(ephemeral=True, cudart=cudart)
    strategy._on_cuda = True  # the load's CUDA path; the copies themselves stay host copies
    monkeypatch.setattr(torch.cuda, "Event", _SlowCopyEvent)
    monkeypatch.setattr(_SlowCopyEvent, "slow", [True])
    unmapped, late = [], []
    real_unmap, real_release = hostmem.unmap, hostmem.release

    def unmap(mapping):
        unmapped.append((mapping.address, mapping.length))
        real_unmap(mapping)

    def release(address, length):
        if any(a <= address < a + n for a, n in unmapped):
            late.append(address)  # not passed on: the range may be someone else's now
            return
        real_release(address, length)

    monkeypatch.setattr(hostmem, "unmap", unmap)
    monkeypatch.setattr(hostmem, "release", release)
    real_sources = hugepin.to_load_sources

    def second_restore_fails(models):
        first, second = real_sources(models)

        def out_of_memory():
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")

        return [first, SimpleNamespace(key=second.key, data=second.data, restore=out_of_memory)]

    try:
        strategy.offload(models)
        registered = [address for address, _ in cudart.registered]
        monkeypatch.setattr(hugepin, "to_load_sources", second_restore_fails)
        with pytest.raises(torch.OutOfMemoryError):
            strategy.load(models)
    finally:
        strategy.close()
    assert late == []
    assert sorted(cudart.unregistered) == sorted(registered)  # each range exactly once
    assert strategy.locked_bytes == 0


def test_a_registration_failing_on_one_of_several_registrars_fails_the_offload():
    """No short copy: the offload raises, every storage stays where it was, and what the
    other registrars locked is unregistered once at ``close()``."""
    models, buffers = _models()
    originals = [b.param_data.clone() for b in buffers]

    class FailsThird(FakeCudart):
        def register(self, address, nbytes):
            if len(self.registered) == 2 and not getattr(self, "failed", False):
                self.failed = True
                raise hostmem.CudaError(f"cudaHostRegister of {nbytes} bytes failed: 2")
            super().register(address, nbytes)

    cudart = FailsThird()
    strategy = _strategy(ephemeral=False, cudart=cudart, registrars=3)
    try:
        with pytest.raises(hostmem.CudaError):
            strategy.offload(models)
        for b, original in zip(buffers, originals, strict=True):
            assert torch.equal(b.param_data, original)  # not freed
    finally:
        strategy.close()
    assert len(cudart.registered) >= 2
    assert sorted(cudart.unregistered) == sorted(a for a, _ in cudart.registered)
    assert strategy.locked_bytes == 0
