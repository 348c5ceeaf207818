"""``engine/hostmem``: exact mappings, huge-page advice and its refusal, touch, release."""

import errno
import itertools

import pytest

from offloadprobe.engine import hostmem

MIB = 2**20


def test_chunks_tile_the_range_at_multiples_of_the_chunk_size():
    chunks = hostmem.plan_chunks(10 * MIB + 7, 4 * MIB)
    assert chunks == ((0, 4 * MIB), (4 * MIB, 4 * MIB), (8 * MIB, 2 * MIB + 7))
    assert hostmem.plan_chunks(8 * MIB, 4 * MIB) == ((0, 4 * MIB), (4 * MIB, 4 * MIB))
    with pytest.raises(ValueError):
        hostmem.plan_chunks(MIB, 4097)


def test_chunks_ramp_up_from_the_first_size_and_still_tile_the_range():
    chunks = hostmem.plan_chunks(40 * MIB + 5, 16 * MIB, 2 * MIB)
    assert [n for _, n in chunks] == [2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 10 * MIB + 5]
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(chunks))
    assert chunks[0][0] == 0 and sum(n for _, n in chunks) == 40 * MIB + 5
    assert hostmem.plan_chunks(MIB, 16 * MIB, 2 * MIB) == ((0, MIB),)
    assert hostmem.plan_chunks(8 * MIB, 4 * MIB, 4 * MIB) == hostmem.plan_chunks(8 * MIB, 4 * MIB)
    with pytest.raises(ValueError):
        hostmem.plan_chunks(MIB, 4 * MIB, 4097)


def test_worker_threads_leave_the_node_two_cpus_and_the_copy_and_register_threads_theirs():
    assert hostmem.worker_threads(16) == 12
    assert hostmem.worker_threads(16, local_ranks=2) == 5
    assert hostmem.worker_threads(16, local_ranks=8) == 1
    assert hostmem.worker_threads(2) == 1
    assert hostmem.worker_threads(hostmem.available_cpus()) >= 1


@pytest.mark.parametrize("huge", [False, True])
def test_a_mapping_is_exact_and_resident_only_once_touched(huge):
    size = 5 * MIB + 123
    m = hostmem.map_exact(size, huge=huge)
    try:
        assert m.nbytes == size and m.length == hostmem.page_round(size)
        assert m.length - size < hostmem.PAGE
        assert hostmem.resident_bytes(m.address, m.length) == 0
        if huge and m.refused is None:
            hpage = hostmem.huge_page_size()
            assert m.address % hpage == 0 and m.huge_bytes == size // hpage * hpage
        method = hostmem.touch(m.address, m.length, "auto")
        assert method in ("populate", "memset")
        assert hostmem.resident_bytes(m.address, m.length) == m.length
        hostmem.release(m.address, m.length)
        assert hostmem.resident_bytes(m.address, m.length) == 0
    finally:
        hostmem.unmap(m)


def _refusing(advice_refused, err=errno.EINVAL):
    real = hostmem.madvise

    def madvise(address, length, advice):
        return err if advice == advice_refused else real(address, length, advice)

    return madvise


def test_a_refused_huge_page_advice_keeps_4k_pages_and_says_why(monkeypatch):
    monkeypatch.setattr(hostmem, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(hostmem, "madvise", _refusing(hostmem.MADV_HUGEPAGE))
    m = hostmem.map_exact(4 * MIB, huge=True)
    try:
        assert m.huge_bytes == 0
        assert "refused madvise(MADV_HUGEPAGE): EINVAL" in m.refused
        hostmem.touch(m.address, m.length, "memset")
        assert hostmem.resident_bytes(m.address, m.length) == m.length
    finally:
        hostmem.unmap(m)


def test_transparent_huge_pages_off_is_a_refusal_too(monkeypatch):
    monkeypatch.setattr(hostmem, "thp_mode", lambda: "never")
    m = hostmem.map_exact(4 * MIB, huge=True)
    hostmem.unmap(m)
    assert m.huge_bytes == 0 and "never" in m.refused
    plain = hostmem.map_exact(MIB, huge=False)
    hostmem.unmap(plain)
    assert plain.refused is None  # not asked for: nothing refused


def test_touch_falls_back_to_memset_where_the_kernel_lacks_populate(monkeypatch):
    monkeypatch.setattr(hostmem, "madvise", _refusing(hostmem.MADV_POPULATE_WRITE))
    m = hostmem.map_exact(MIB, huge=False)
    try:
        assert hostmem.touch(m.address, m.length, "auto") == "memset"
        assert hostmem.resident_bytes(m.address, m.length) == m.length
        with pytest.raises(OSError):
            hostmem.touch(m.address, m.length, "populate")
    finally:
        hostmem.unmap(m)


def test_the_loaded_cuda_runtime_is_found_by_its_mapped_file():
    maps = (
        "7f00-7f10 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
        "7f20-7f30 r-xp 00000000 08:01 13 /site/nvidia/cu13/lib/libcudart.so.13\n"
        "7f40-7f50 rw-p 00000000 00:00 0 \n"
    )
    assert hostmem.loaded_library("libcudart.so", maps) == "/site/nvidia/cu13/lib/libcudart.so.13"
    assert hostmem.loaded_library("libcudart.so", "7f00-7f10 r-xp 0 08:01 1 /lib/libc.so\n") is None
