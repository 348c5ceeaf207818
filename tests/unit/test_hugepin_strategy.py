"""``hugepin`` and ``relock`` on fake DDP buffers in this process: bit-exact round trips,
exact host mappings that stay (hugepin) or go after every load (relock), one copy per
registered range, registered bytes, and the note when huge pages are refused."""

import errno
from types import SimpleNamespace

import pytest
import torch

from offloadprobe.engine import hostmem
from offloadprobe.engine import hugepin_pipeline as hugepin
from offloadprobe.engine.hugepin_pipeline import HugePinStrategy, Settings, Step, plan
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
    assert Settings.from_options({}, local_ranks=1).threads == 14
    assert Settings.from_options({}, local_ranks=2).threads == 6
    options = {"threads": "3", "chunk_mib": "3", "huge_pages": "0", "touch": "memset"}
    s = Settings.from_options(options | {"registrars": "2", "touch_first": "1"}, local_ranks=1)
    assert (s.threads, s.registrars, s.huge_pages, s.touch) == (3, 2, False, "memset")
    assert s.touch_first
    default = Settings.from_options({}, local_ranks=1)
    assert default.registrars == 1 and not default.touch_first
    assert s.chunk_bytes % hostmem.huge_page_size() == 0 and s.chunk_bytes >= 3 * MIB
    assert Settings.from_options({}, local_ranks=1).chunk_bytes == hugepin.CHUNK_MIB * MIB
    with pytest.raises(Exception, match="touch"):
        Settings.from_options({"touch": "sometimes"})
    with pytest.raises(Exception, match="take threads"):
        Settings.from_options({"thread": "3"})


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
