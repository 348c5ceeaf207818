from offloadprobe.measure.probes.pinned import PinnedProbe, normalise

GiB = 2**30


def test_newer_torch_keys():
    stats = {
        "allocated_bytes.current": 8 * GiB,
        "allocated_bytes.peak": 16 * GiB,
        "active_bytes.current": 8 * GiB,
    }
    assert normalise(stats) == (8 * GiB, 8 * GiB, 16 * GiB, "active_bytes")


def test_older_torch_keys():
    stats = {
        "reserved_bytes.current": 16 * GiB,
        "reserved_bytes.peak": 24 * GiB,
        "allocated_bytes.current": 8 * GiB,
    }
    assert normalise(stats) == (16 * GiB, 8 * GiB, 24 * GiB, "reserved_bytes")


def test_disabled_without_cuda():
    probe = PinnedProbe(enabled=False)
    probe.begin()
    assert probe.end() is None
