"""``tms`` with a fake torch_memory_saver: where the buffers go, what pause/resume do, and the
one-line errors where it cannot run. The real one needs a GPU: benchmarks/field_strategies.py."""

import contextlib
import sys
from types import SimpleNamespace

import pytest
import torch

from offloadprobe.core.errors import StrategyError
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies import tms

EMULATED = Runtime(device="cpu", emulated=True, note=None)


class FakeSaver:
    """Records region entries and pauses; 'pausing' a tag keeps a backup and wipes the data."""

    def __init__(self):
        self.tag = None
        self.allocated = {}  # tag -> storages allocated while the region was open
        self.backup = {}
        self.calls = []

    @contextlib.contextmanager
    def region(self, tag, enable_cpu_backup):
        self.tag = (tag, enable_cpu_backup)
        yield
        self.tag = None

    def note(self, tensor):
        if self.tag is not None:
            self.allocated.setdefault(self.tag, []).append(tensor)

    def pause(self, tag):
        self.calls.append(("pause", tag))
        for (t, backup), tensors in self.allocated.items():
            if t == tag:
                self.backup[tag] = [x.clone() for x in tensors] if backup else None
                for x in tensors:  # a storage moved whole is bytes: all ones, a NaN in bf16
                    x.fill_(float("nan") if x.is_floating_point() else 255)

    def resume(self, tag):
        self.calls.append(("resume", tag))
        for x, saved in zip(self.allocated_for(tag), self.backup.get(tag) or [], strict=False):
            x.copy_(saved)

    def allocated_for(self, tag):
        return [x for (t, _), xs in self.allocated.items() if t == tag for x in xs]


def _model():
    buf = SimpleNamespace(param_data=torch.randn(64).to(torch.bfloat16), grad_data=torch.ones(64))
    return [SimpleNamespace(buffers=[buf], expert_parallel_buffers=[])], buf


def test_pause_backs_up_params_and_resume_restores_them_with_grads_zeroed(monkeypatch):
    saver = FakeSaver()
    strategy = tms.TmsStrategy(Runtime(device="cpu", emulated=False, note=None), saver=saver)
    models, buf = _model()
    original = buf.param_data.clone()
    real_restore = tms.restore_storage

    def restore_and_note(tensor):
        real_restore(tensor)
        saver.note(tensor)

    monkeypatch.setattr(tms, "restore_storage", restore_and_note)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (10**12, 0))
    strategy._move_into_regions(models)
    # params in the backed-up region, grads in the one without backup; views stay valid
    assert saver.allocated[(tms.PARAMS_TAG, True)] == [buf.param_data]
    assert saver.allocated[(tms.GRADS_TAG, False)] == [buf.grad_data]
    assert torch.equal(buf.param_data, original)
    strategy.offload(models)
    assert saver.calls == [("pause", tms.PARAMS_TAG), ("pause", tms.GRADS_TAG)]
    strategy.offload(models)  # an offload of what is offloaded is a no-op
    assert len(saver.calls) == 2
    strategy.load(models)
    assert torch.equal(buf.param_data, original)
    assert not buf.grad_data.any()
    assert saver.calls[-2:] == [("resume", tms.PARAMS_TAG), ("resume", tms.GRADS_TAG)]
    strategy.load(models)  # and so is a load of what is loaded
    assert len(saver.calls) == 4


def test_cpu_emulation_is_a_one_line_usage_error():
    with pytest.raises(StrategyError, match="needs a CUDA GPU") as err:
        tms.TmsStrategy(EMULATED)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "torch_memory_saver", None)
    with pytest.raises(StrategyError, match=r"offloadprobe\[tms\]"):
        tms.load_saver(Runtime(device="cuda", emulated=False, note=None))


def test_every_pause_pins_a_fresh_exact_backup():
    events = tms.host_events([100, 50], 2, ["b0", "b1"])
    allocs = [e for e in events if isinstance(e, tms.Alloc)]
    assert [(a.nbytes, a.kind) for a in allocs] == [(100, "registered"), (50, "registered")] * 2
    # resume frees a backup: the next pause allocates after the previous one is gone
    assert [type(e).__name__ for e in events] == [
        "Alloc",
        "Alloc",
        "Free",
        "Free",
        "Alloc",
        "Alloc",
    ]


def _reference(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(16, 8).to(torch.bfloat16).requires_grad_(False)


def test_parameters_outside_the_buffers_pause_in_the_region_or_say_why_not(monkeypatch):
    saver = FakeSaver()
    strategy = tms.TmsStrategy(Runtime(device="cpu", emulated=False, note=None), saver=saver)
    models, _ = _model()
    reference = _reference(1)
    models.append(reference)  # not DDP-wrapped: every parameter is loose
    homed = [p.detach() for p in reference.parameters()]
    originals = [p.clone() for p in homed]
    real_restore = tms.restore_storage

    def restore_and_note(tensor):
        real_restore(tensor)
        saver.note(tensor)

    monkeypatch.setattr(tms, "restore_storage", restore_and_note)
    # the driver gets memory back with every pause (the first offload checks it did)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (2**30 * len(saver.calls), 0))
    strategy.offload(models)
    # the first offload took them into the backed-up region, beside param_data
    in_region = saver.allocated[(tms.PARAMS_TAG, True)]
    assert [t.untyped_storage()._cdata for t in in_region[1:]] == [
        t.untyped_storage()._cdata for t in homed
    ]
    released = {s._cdata for s in strategy.released_storages(models)}
    assert {t.untyped_storage()._cdata for t in homed} <= released
    assert all(t.isnan().all() for t in homed)  # paused: the fake wiped them
    strategy.load(models)
    assert all(torch.equal(t, o) for t, o in zip(homed, originals, strict=True))
    assert strategy.notes == []
    # a chunk that appears after the regions were filled cannot be paused: a host copy each
    late = _reference(2)
    models.append(late)
    late_originals = [p.detach().clone() for p in late.parameters()]
    strategy.offload(models)
    assert all(p.untyped_storage().nbytes() == 0 for p in late.parameters())
    # freed by PyTorch, not released through the driver: not claimed as paused
    late_keys = {p.untyped_storage()._cdata for p in late.parameters()}
    assert not late_keys & {s._cdata for s in strategy.released_storages(models)}
    strategy.offload(models)  # offloaded already: a no-op
    strategy.load(models)
    strategy.load(models)  # loaded already: a no-op
    assert all(torch.equal(p, o) for p, o in zip(late.parameters(), late_originals, strict=True))
    assert all(torch.equal(t, o) for t, o in zip(homed, originals, strict=True))
    (note,) = strategy.notes
    assert note.startswith("tms: 2 parameters outside the DDP buffers were not in")


def test_each_old_block_goes_back_to_the_driver_before_its_region_allocates(monkeypatch):
    """torch_memory_saver maps a region's memory itself: a block PyTorch still caches is
    not free for it (on the H200 a 12 GiB buffer's region failed, out of memory)."""
    saver = FakeSaver()
    events = []
    runtime = Runtime(device="cpu", emulated=False, note=None)
    monkeypatch.setattr(Runtime, "empty_cache", lambda self: events.append("empty_cache"))
    real_region = saver.region

    @contextlib.contextmanager
    def region(tag, enable_cpu_backup):
        events.append(("region", tag, buf.param_data.untyped_storage().nbytes()))
        with real_region(tag, enable_cpu_backup):
            yield

    monkeypatch.setattr(saver, "region", region)
    strategy = tms.TmsStrategy(runtime, saver=saver)
    models, buf = _model()
    strategy._move_into_regions(models)
    regions = [i for i, e in enumerate(events) if isinstance(e, tuple)]
    assert len(regions) == 2  # param_data's, grad_data's
    assert all(events[i - 1] == "empty_cache" for i in regions)
    assert events[regions[0]][2] == 0  # param_data's old storage freed by then
