"""Host pages, counted exactly: what the emulated device's accounting stands on.

GIVEN a private anonymous mapping of its own (guard pages keep the kernel from merging it
with a neighbour, so its own ``Rss`` in ``/proc/self/smaps`` is exact, whatever other
threads do),
WHEN pages of it are only read (the kernel maps its shared zero page there), written, made
resident with ``populate`` (``MADV_POPULATE_WRITE``, or the write-back older kernels get),
or dropped,
THEN ``populate`` makes every page resident and counted in RSS without changing a byte,
``resident`` (mincore) agrees page for page, and ``owned_pages`` are those wholly inside
a range.
"""

from __future__ import annotations

import ctypes

import pytest

from offloadprobe.engine.runtime import host_pages
from offloadprobe.engine.runtime.host_pages import PAGE, drop, owned_pages, populate, resident

PAGES = 16


@pytest.fixture
def mapping():
    """``PAGES`` private anonymous pages between two PROT_NONE guard pages."""
    libc = host_pages._libc()
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = libc.mmap(None, (PAGES + 2) * PAGE, 0x3, 0x22, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    assert libc.mprotect(base, PAGE, 0) == 0
    assert libc.mprotect(base + (PAGES + 1) * PAGE, PAGE, 0) == 0
    yield base + PAGE
    libc.munmap(base, (PAGES + 2) * PAGE)


def _rss(start: int) -> int:
    """Resident pages of the mapping that starts at ``start``, by the kernel's smaps."""
    found = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[0].isupper():
                found = int(line.split("-")[0], 16) == start
            elif found and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024 // PAGE
    raise AssertionError("mapping not found")


@pytest.mark.parametrize("kernel_has_populate", [True, False])
def test_populate_counts_read_pages_in_rss_and_keeps_every_byte(
    mapping, monkeypatch, kernel_has_populate
):
    monkeypatch.setattr(host_pages, "_POPULATE", [kernel_has_populate])
    view = (ctypes.c_ubyte * (PAGES * PAGE)).from_address(mapping)
    assert sum(view[i * PAGE] for i in range(8)) == 0  # read only: the zero page
    for i in range(8, 12):
        view[i * PAGE + 7] = i
    assert resident(mapping, PAGES) == 12 and _rss(mapping) == 4  # mincore counts both
    populate(mapping, PAGES)
    assert resident(mapping, PAGES) == PAGES and _rss(mapping) == PAGES
    assert [view[i * PAGE + 7] for i in range(PAGES)] == [0] * 8 + [8, 9, 10, 11] + [0] * 4
    drop(mapping + 2 * PAGE, 3)
    assert resident(mapping, PAGES) == PAGES - 3 and _rss(mapping) == PAGES - 3


def test_owned_pages_lie_wholly_inside_the_range():
    assert owned_pages(10 * PAGE, 3 * PAGE) == (10 * PAGE, 3)
    assert owned_pages(10 * PAGE + 64, 3 * PAGE) == (11 * PAGE, 2)
    assert owned_pages(10 * PAGE + 64, 2 * PAGE - 128) == (11 * PAGE, 0)
    assert owned_pages(10 * PAGE + 64, 0) == (11 * PAGE, 0)


def test_residency_page_by_page_and_a_drop_that_keeps_marked_pages(mapping):
    from offloadprobe.engine.runtime.host_pages import drop_except, residency

    populate(mapping, PAGES)
    assert residency(mapping, PAGES) == b"\1" * PAGES
    keep = b"\0\1\1\0" * (PAGES // 4)  # every page marked 1 stays
    assert drop_except(mapping + PAGE, PAGES - 2, keep, 1) == keep[1 : PAGES - 1].count(0)
    assert residency(mapping, PAGES) == b"\1" + keep[1 : PAGES - 1] + b"\1"
    assert drop_except(mapping, PAGES, None) == PAGES and resident(mapping, PAGES) == 0


def test_a_glibc_block_says_whether_it_is_a_mapping_of_its_own():
    from offloadprobe.engine.runtime.host_pages import _libc, glibc_mapped

    libc = _libc()
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    small, large = libc.malloc(4096), libc.malloc(64 << 20)  # heap; over every threshold
    try:
        # a heap block that happens to start a page is not read (the rule below), as in
        # one full run of the suite
        assert glibc_mapped(small) is (None if small % PAGE == 0 else False)
        assert glibc_mapped(large) is True
        assert glibc_mapped(large - large % PAGE) is None  # a page start: not read
    finally:
        libc.free(small)
        libc.free(large)
