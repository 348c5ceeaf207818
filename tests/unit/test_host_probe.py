"""The host probe against known allocations: invariants with margins, not exact numbers."""

import numpy as np
import pytest

from offloadprobe.measure.probes.host import HostProbe, read_status, reset_hwm

N = 256 * 2**20


def _touch_and_free(nbytes: int) -> None:
    buf = np.ones(nbytes, dtype=np.uint8)  # every page written, so it is resident
    del buf


@pytest.mark.skipif(not reset_hwm(), reason="kernel refuses clear_refs here")
def test_transient_allocation_freed_at_once_raises_exact_peak():
    probe = HostProbe()
    probe.begin()
    _touch_and_free(N)
    reading = probe.end()
    assert reading.method == "vmhwm"
    assert reading.peak - reading.rss_before >= 0.9 * N
    assert reading.rss_after - reading.rss_before < 0.5 * N  # it really was freed


@pytest.mark.skipif(not reset_hwm(), reason="kernel refuses clear_refs here")
def test_peak_is_reset_between_phases():
    probe = HostProbe()
    probe.begin()
    _touch_and_free(N)
    first = probe.end()
    probe.begin()
    second = probe.end()
    assert first.peak - first.rss_before >= 0.9 * N
    assert second.peak - second.rss_before < 0.1 * N


def test_sampling_fallback_is_labelled_and_sees_a_held_allocation():
    probe = HostProbe(force_sampling=True, interval_s=0.001)
    probe.begin()
    held = np.ones(N, dtype=np.uint8)
    import time

    time.sleep(0.05)
    reading = probe.end()
    del held
    assert reading.method == "sampled"
    assert reading.peak - reading.rss_before >= 0.9 * N


M = 64 * 2**20


class _Arena:
    """A fake emulated device: a constant part of RSS that can grow mid-phase."""

    def __init__(self, constant: int) -> None:
        self.constant = constant
        self.on_grow = self.on_grown = None

    def grow(self, by: int, held: list) -> None:
        self.on_grow()
        held.append(np.ones(by, dtype=np.uint8))  # the device really takes the pages
        self.constant += by
        self.on_grown()


def test_emulated_device_constant_is_taken_out_of_host_figures():
    arena = _Arena(3 * M)
    probe = HostProbe(arena=arena)
    probe.begin()
    held = np.ones(M, dtype=np.uint8)
    reading = probe.end()
    del held
    assert reading.host_rss_before == reading.rss_before - 3 * M
    assert reading.host_rss_after == reading.rss_after - 3 * M
    assert reading.host_peak == reading.peak - 3 * M
    assert reading.host_peak - reading.host_rss_before >= 0.95 * M


def test_a_growing_device_splits_the_high_water_interval():
    # GIVEN a host allocation of M freed before the device grows by 2M
    if not reset_hwm():
        pytest.skip("clear_refs refused here")
    arena = _Arena(0)
    probe = HostProbe(arena=arena)
    device: list = []
    probe.begin()
    transient = np.ones(M, dtype=np.uint8)
    del transient
    arena.grow(2 * M, device)
    reading = probe.end()
    # THEN the host peak is the transient M, not the device growth
    assert 0.95 * M <= reading.host_peak - reading.host_rss_before <= 1.1 * M
    assert reading.device_in_host_after == 2 * M
    assert reading.anon_after > 0 and reading.file_after > 0


def test_status_has_the_fields_we_read():
    status = read_status()
    assert status["VmRSS"] > 0
    assert status["VmHWM"] >= status["VmRSS"]
