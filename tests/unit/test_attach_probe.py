"""One measured call in this process: the exact host peak over its start, nesting, the
sampled fallback, and the GPU fields left empty where CUDA is not initialised.

Host figures in a busy test process are asserted as bounds with margins: the transient
is tens of MiB, written page by page, so it stands far above the noise; and above
glibc's largest mmap threshold (32 MiB), so it is fresh pages, never a reused heap.
"""

from __future__ import annotations

import pytest

from offloadprobe.attach import probe

MIB = 1024**2


def _transient(nbytes: int) -> None:
    block = bytearray(nbytes)  # zero-filled: every page touched
    del block


@pytest.fixture
def calls():
    return probe.CallProbe(reset_gpu_peak=True)


def test_a_transient_freed_inside_the_call_is_its_peak(calls):
    frame = calls.enter("spike", "t:spike", 1)
    _transient(48 * MIB)
    record = calls.exit(frame, None)
    assert record["host_peak_method"] == "vmhwm"
    assert 0.95 * 48 * MIB <= record["rss_peak_bytes"] <= 1.2 * 48 * MIB
    assert abs(record["host_after_bytes"] - record["host_before_bytes"]) < 8 * MIB
    assert record["raised"] is False and record["index"] == 1 and record["depth"] == 0


def test_an_inner_call_does_not_hide_the_outer_calls_earlier_peak(calls):
    outer = calls.enter("outer", "t:o", 1)
    _transient(64 * MIB)  # before the inner call resets the high-water mark
    inner = calls.enter("inner", "t:i", 1)
    _transient(40 * MIB)
    inner_record = calls.exit(inner, None)
    outer_record = calls.exit(outer, RuntimeError("x"))
    assert inner_record["depth"] == 1 and inner_record["parent"] == ["outer", 1]
    assert 0.95 * 40 * MIB <= inner_record["rss_peak_bytes"] <= 1.2 * 40 * MIB
    assert outer_record["rss_peak_bytes"] >= 0.95 * 64 * MIB
    assert outer_record["raised"] is True and outer_record["error"] == "RuntimeError"


def test_where_the_reset_is_refused_the_peak_is_sampled_and_said(calls, monkeypatch):
    monkeypatch.setattr(probe, "reset_hwm", lambda: False)
    frame = calls.enter("slow", "t:slow", 1)
    block = bytearray(40 * MIB)
    import time

    time.sleep(0.05)  # many samples while the block lives
    del block
    record = calls.exit(frame, None)
    assert record["host_peak_method"] == "sampled"
    assert record["rss_peak_bytes"] >= 0.9 * 40 * MIB


def test_without_cuda_initialised_the_gpu_and_pinned_fields_are_not_measured(calls):
    record = calls.exit(calls.enter("x", "t:x", 1), None)
    assert all(record[key] is None for key in probe.GPU_KEYS)
    assert record["pinned_after_bytes"] is None


def test_a_by_fact_pinned_source_plugs_in(calls, monkeypatch):
    class Fact:
        def __init__(self):
            self.n = 0

        def figures(self):
            self.n += 4096
            return {"reserved": self.n, "in_use": self.n, "source": "fake by-fact"}

    monkeypatch.setattr(probe, "PINNED", Fact())
    record = calls.exit(calls.enter("x", "t:x", 1), None)
    assert (record["pinned_before_bytes"], record["pinned_after_bytes"]) == (4096, 8192)
    assert record["pinned_source"] == "fake by-fact"


def test_ranks_come_from_the_launchers_variables(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("GROUP_RANK", "2")
    assert probe.ranks() == {"rank": 3, "local_rank": 1, "node_rank": 2}
