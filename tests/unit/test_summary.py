"""summarise() on hand-made records: exact arithmetic on fakes."""

from offloadprobe.core.records import HostReading, PhaseRecord, PinnedReading
from offloadprobe.measure.summary import summarise

MiB = 2**20
P = 100 * MiB


def phase(cycle, name, *, before, after, peak, seconds=1.0, pinned=None):
    return PhaseRecord(
        cycle=cycle,
        phase=name,
        seconds=seconds,
        bytes_moved=0 if name == "train" else P,
        gbps=None if name == "train" else P / seconds / 1e9,
        host=HostReading(
            rss_before=before, rss_after=after, peak=peak, shmem_after=0, method="vmhwm"
        ),
        pinned=pinned,
        gpu=None,
        cgroup=None,
    )


def test_peak_steady_and_rates():
    base = 1000 * MiB
    phases = [
        phase(0, "train", before=base, after=base, peak=base + 9 * P),  # excluded
        phase(0, "offload", before=base, after=base + P, peak=base + 2 * P, seconds=2.0),
        phase(0, "load", before=base + P, after=base + P, peak=base + P),
        phase(1, "offload", before=base + P, after=base + 2 * P, peak=base + 3 * P, seconds=0.5),
        phase(1, "load", before=base + 2 * P, after=base + 2 * P, peak=base + 2 * P),
    ]
    s = summarise(
        phases,
        payload_bytes=P,
        baseline_host_bytes=base,
        gpu_baseline_bytes=None,
        registered_bytes=0,
        integrity_ok=True,
    )
    assert s.host_peak_bytes == 3 * P and s.host_peak_x == 3.0
    assert s.steady_host_bytes == 2 * P and s.steady_host_x == 2.0
    assert s.first_offload_gbps == P / 2.0 / 1e9
    assert s.offload_gbps == P / 0.5 / 1e9
    assert s.pinned_reserved_bytes is None and s.gpu_left_after_offload_bytes is None


def test_pinned_adds_registered_bytes():
    pinned = PinnedReading(
        reserved_after=8 * P, in_use_after=8 * P, reserved_peak=8 * P, key_schema="active_bytes"
    )
    phases = [
        phase(0, "offload", before=0, after=P, peak=P, pinned=pinned),
        phase(0, "load", before=P, after=P, peak=P, pinned=pinned),
    ]
    s = summarise(
        phases,
        payload_bytes=P,
        baseline_host_bytes=0,
        gpu_baseline_bytes=None,
        registered_bytes=P,
        integrity_ok=True,
    )
    assert s.pinned_reserved_bytes == 9 * P


def test_parameters_and_optimizer_state_each_over_their_own_bytes():
    """Params (P) move first and stay on the host; the optimizer state (S = 4P) moves next
    with a 1.5x transient. Each part is over its own bytes, the whole over P + S."""
    base, S = 1000 * MiB, 4 * P
    phases = [
        phase(0, "offload", before=base, after=base + P, peak=base + P),
        phase(
            0, "offload optimizer", before=base + P, after=base + P + S, peak=base + P + S + S // 2
        ),
        phase(0, "load", before=base + P + S, after=base + P + S, peak=base + P + S),
        phase(0, "load optimizer", before=base + P + S, after=base + P, peak=base + P + S),
    ]
    s = summarise(
        phases,
        payload_bytes=P,
        baseline_host_bytes=base,
        gpu_baseline_bytes=None,
        registered_bytes=0,
        integrity_ok=True,
        optimizer_bytes_to_move=S,
    )
    assert (s.params.host_peak_x, s.params.steady_host_x) == (1.0, 1.0)
    assert (s.optimizer.host_peak_x, s.optimizer.steady_host_x) == (1.5, 1.0)
    assert s.moved_bytes == P + S
    assert s.host_peak_bytes == P + S + S // 2 and s.host_peak_x == (P + 1.5 * S) / (P + S)
    assert s.steady_host_x == 1.0
