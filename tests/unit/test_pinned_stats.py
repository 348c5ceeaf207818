"""Pinned "in use" from torch's host allocator stats, on fake stats dicts shaped as torch
2.11 and torch 2.13 write them over three offload/load cycles of a strategy that reuses
its cached pinned blocks (a fresh ``torch.empty(..., pin_memory=True)`` host copy each
offload, dropped at each load: the block goes back to the cache and is handed out again).

The truth is the strategy's own: after each offload one block of ``B`` bytes is in use,
after each load none, and the allocator owns one block throughout. torch 2.11 counts a
reuse as a new active block and a free as nothing (a block without stream events) or as
+1 byte (a block freed through its events, as every non_blocking copy's is): its
``active_bytes.current`` climbs B, 2B, 3B (the H200's 1.98x -> 3.96x -> 5.94x)."""

from __future__ import annotations

import sys
import types

import pytest

from offloadprobe.core import pinned_stats
from offloadprobe.measure.probes.pinned import PinnedProbe, normalise

GiB = 2**30
B = 2 * GiB  # one power-of-two pinned block


def _stats(*, owned: int, active: int, handed: int, freed: int) -> dict[str, int]:
    """A flat ``host_memory_stats()`` dict of the newer key schema."""
    return {
        "allocations.current": 1,
        "allocated_bytes.current": owned,
        "allocated_bytes.peak": owned,
        "allocated_bytes.allocated": owned,
        "allocated_bytes.freed": 0,
        "active_bytes.current": active,
        "active_bytes.allocated": handed,
        "active_bytes.freed": freed,
        "active_bytes.peak": active,
    }


def _torch_2_11(cycles: int = 3, *, events: bool) -> list[tuple[str, dict[str, int]]]:
    """After each offload and load as torch 2.11 counts it: a reuse raises the active
    counters, a free lowers nothing (no events) or lowers active_bytes by -1 (events)."""
    out = []
    for c in range(cycles):
        handed = (c + 1) * B
        frees_before = c if events else 0
        out.append(
            (
                "offload",
                _stats(owned=B, active=handed + frees_before, handed=handed, freed=-frees_before),
            )
        )
        frees = c + 1 if events else 0
        out.append(("load", _stats(owned=B, active=handed + frees, handed=handed, freed=-frees)))
    return out


def _torch_2_13(cycles: int = 3) -> list[tuple[str, dict[str, int]]]:
    """The same cycles as torch 2.13 counts them: every free lowers active by the block."""
    out = []
    for c in range(cycles):
        out.append(("offload", _stats(owned=B, active=B, handed=(c + 1) * B, freed=c * B)))
        out.append(("load", _stats(owned=B, active=0, handed=(c + 1) * B, freed=(c + 1) * B)))
    return out


TRUTH = {"offload": B, "load": 0}


@pytest.mark.parametrize("events", [False, True], ids=["sync-free", "event-free"])
@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.13.0+cpu"])
def test_torch_2_11_counters_never_read_as_in_use(version, events):
    """Whichever torch reads them, 2.11's counters give no in-use figure (None), never
    one that climbs past what is owned; the owned figure stays the truth."""
    for _, stats in _torch_2_11(events=events):
        figures = pinned_stats.read(stats, "2.11.0+cu130")
        assert figures.in_use is None and figures.reserved == B
        # read as the torch under test would: where a reading is given it is the truth
        # (2.11's dicts contradict themselves from cycle 1 on: in use above owned)
        in_use = pinned_stats.read(stats, version).in_use
        assert in_use is None or in_use <= figures.reserved


def test_torch_2_13_counters_read_in_use_flat_over_the_cycles():
    readings = [(phase, pinned_stats.read(s, "2.13.0+cpu")) for phase, s in _torch_2_13()]
    assert [f.in_use for _, f in readings] == [TRUTH[phase] for phase, _ in readings]
    assert {f.reserved for _, f in readings} == {B}
    assert {f.schema for _, f in readings} == {"active_bytes"}


def test_the_probe_never_reports_2_11s_climbing_active_bytes():
    """``normalise`` (the pinned probe's reading, under the torch installed here): flat
    or absent over the cycles, never above the owned bytes."""
    in_use = [normalise(s)[1] for _, s in _torch_2_11(events=True)]
    assert all(u is None or u <= B for u in in_use), in_use


def test_a_2_13_dict_that_contradicts_itself_gives_no_in_use():
    assert (
        pinned_stats.read(_stats(owned=B, active=2 * B, handed=2 * B, freed=0), "2.13.0").in_use
        is None
    )
    assert pinned_stats.read(_stats(owned=B, active=B, handed=B, freed=-1), "2.13.0").in_use is None


def test_older_torch_keys_read_owned_only():
    stats = {
        "reserved_bytes.current": 16 * GiB,
        "reserved_bytes.peak": 24 * GiB,
        "allocated_bytes.current": 8 * GiB,
    }
    figures = pinned_stats.read(stats, "2.6.0")
    assert (figures.reserved, figures.in_use, figures.reserved_peak) == (16 * GiB, None, 24 * GiB)
    assert figures.schema == "reserved_bytes"


@pytest.mark.parametrize(
    ("version", "trusted"),
    [
        ("2.11.0+cu130", False),
        ("2.12.1", False),
        ("2.13.0+cpu", True),
        ("2.14.0a0+git", True),
        ("3.0.0", True),
        (None, False),
        ("garbage", False),
    ],
)
def test_which_versions_count_frees(version, trusted):
    assert pinned_stats.counts_frees(version) is trusted
    assert (pinned_stats.in_use_note(version) is None) is trusted


def test_the_sampler_reads_the_same_figures_from_the_nested_dict():
    from offloadprobe.measure.sampler import nested_pinned

    old = {"reserved_bytes": {"current": 8}, "allocated_bytes": {"current": 3}}
    new = {"allocated_bytes": {"current": 8}, "active_bytes": {"current": 3, "freed": 5}}
    climbing = {"allocated_bytes": {"current": 8}, "active_bytes": {"current": 24, "freed": -2}}
    assert nested_pinned(old, "2.6.0") == nested_pinned(new, "2.11.0") == (8,)
    assert nested_pinned(new, "2.13.0") == (8, 3)
    assert nested_pinned(climbing, "2.13.0") is None  # a read that contradicts itself


def test_attach_reads_in_use_through_the_same_rule(monkeypatch):
    """The attach probe reads torch from ``sys.modules``: a 2.11 torch's climbing
    counters give no in-use figure there either."""
    from offloadprobe.attach.probe import TorchHostStats

    offload = _torch_2_11(events=True)[4][1]  # cycle 2: active 3B + 2, owned B
    cuda = types.SimpleNamespace(is_initialized=lambda: True, host_memory_stats=lambda: offload)
    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(__version__="2.11.0", cuda=cuda)
    )
    figures = TorchHostStats().figures()
    assert figures is not None and figures["reserved"] == B
    assert figures["in_use"] is None


def test_disabled_without_cuda():
    probe = PinnedProbe(enabled=False)
    probe.begin()
    assert probe.end() is None
