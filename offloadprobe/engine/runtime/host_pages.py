"""Host pages, counted exactly: the pages a byte range owns, which of them are resident
(``mincore(2)``), making them resident or dropping them (``madvise(2)``), and the ballast.

A byte range *owns* the pages that lie wholly inside it: no other allocation can share
them, so dropping them while the range is still its owner's (just before a free) cannot
touch anyone else's bytes, and what they add to RSS is theirs alone. The (at most two)
pages at a range's ends may be shared with neighbours in glibc's heap, or hold glibc's
chunk header; they are never counted or dropped here. All of this is about one range's
own pages: nothing here reads process-wide RSS, which other threads' page faults move.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import mmap
from typing import Any

PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
_MADV_NOHUGEPAGE = 15
_MADV_POPULATE_READ = 22  # Linux 5.14+
_MADV_POPULATE_WRITE = 23
_PROT_RW = 0x1 | 0x2
_MAP_PRIVATE_ANON_NORESERVE = 0x02 | 0x20 | 0x4000
_RESERVE = 1 << 40  # virtual address space for the ballast; NORESERVE: no commit charge


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """glibc, loaded once (``find_library`` runs ``ldconfig`` every time it is asked)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    size, address, number = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int
    libc.mmap.argtypes = [address, size, number, number, number, ctypes.c_long]
    libc.madvise.argtypes = [address, size, number]
    libc.mincore.argtypes = [address, size, address]
    libc.munmap.argtypes = [address, size]
    return libc


def owned_pages(address: int, nbytes: int) -> tuple[int, int]:
    """The first address and the number of the pages wholly inside
    ``[address, address + nbytes)``."""
    start = -(-address // PAGE) * PAGE
    end = (address + max(nbytes, 0)) // PAGE * PAGE
    return start, max(0, (end - start) // PAGE)


def resident(start: int, count: int) -> int:
    """How many of ``count`` pages from ``start`` (page-aligned, mapped) are resident, by
    ``mincore(2)``: the kernel's own answer for these pages, whatever other threads do."""
    if count <= 0:
        return 0
    vector = ctypes.create_string_buffer(count)
    if _libc().mincore(start, count * PAGE, vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return count - vector.raw.count(0)


_RESIDENT = bytes(b & 1 for b in range(256))


def residency(start: int, count: int) -> bytes:
    """``mincore(2)``'s answer page by page: byte ``i`` is 1 where page ``i`` from ``start``
    is resident, else 0."""
    if count <= 0:
        return b""
    vector = ctypes.create_string_buffer(count)
    if _libc().mincore(start, count * PAGE, vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return vector.raw.translate(_RESIDENT)


def drop_except(start: int, count: int, keep: bytes | None, offset: int = 0) -> int:
    """Drop ``count`` pages from ``start`` (``MADV_DONTNEED``) except those whose byte in
    ``keep`` (indexed from ``offset``) is 1; the pages dropped."""
    if keep is None:
        drop(start, count)
        return max(count, 0)
    dropped, i = 0, 0
    while i < count:
        j = keep.find(b"\0", offset + i, offset + count)
        if j < 0:
            break
        end = keep.find(b"\1", j, offset + count)
        end = offset + count if end < 0 else end
        drop(start + (j - offset) * PAGE, end - j)
        dropped += end - j
        i = end - offset
    return dropped


def glibc_mapped(address: int) -> bool | None:
    """Whether the glibc block starting at ``address`` is a mapping of its own (its chunk
    header's ``IS_MMAPPED`` bit, in the size word just below it): a fresh mapping has no
    page anyone used before. None where the word may lie on another page (``address``
    within 8 bytes of a page start), so it is not read."""
    if address % PAGE < 8:
        return None
    return bool(ctypes.c_size_t.from_address(address - 8).value & 2)


_POPULATE = [True]
"""Whether ``MADV_POPULATE_WRITE`` is known to work here (until the kernel refuses it)."""


def populate(start: int, count: int) -> None:
    """Make ``count`` pages from ``start`` resident and private without changing a byte
    (``MADV_POPULATE_WRITE``; on older kernels each page's first byte is written back).
    A page merely read so far maps the kernel's shared zero page, which ``mincore`` calls
    resident and RSS does not count; after this every page is both. Only for pages no
    other thread writes meanwhile (a write-back could undo its write)."""
    if count <= 0:
        return
    if _POPULATE[0]:
        if _libc().madvise(start, count * PAGE, _MADV_POPULATE_WRITE) == 0:
            return
        if ctypes.get_errno() != errno.EINVAL:  # EINVAL: a kernel without it
            raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_WRITE) failed")
        _POPULATE[0] = False
    view = memoryview((ctypes.c_ubyte * (count * PAGE)).from_address(start)).cast("B")
    view[::PAGE] = bytes(view[::PAGE])


def populate_read(start: int, count: int) -> None:
    """Map ``count`` pages from ``start`` as a read of each would (``MADV_POPULATE_READ``,
    Linux 5.14+): a file mapping's pages from the page cache, no copy."""
    if count > 0 and _libc().madvise(start, count * PAGE, _MADV_POPULATE_READ) != 0:
        raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_READ) failed")


def drop(start: int, count: int) -> None:
    """Take ``count`` pages from ``start`` out of RSS (``MADV_DONTNEED``): their contents
    are lost. Only for pages about to be freed, while their owner still holds them."""
    if count > 0 and _libc().madvise(start, count * PAGE, _MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), "madvise(MADV_DONTNEED) failed")


class Ballast:
    """Resident filler pages in one private anonymous mapping outside every allocator: a
    touched prefix that grows (``memset``) and shrinks (``MADV_DONTNEED``) by whole pages,
    with transparent huge pages off (a huge page would make untouched pages resident)."""

    def __init__(self, reserve: int = _RESERVE) -> None:
        self._libc = _libc()
        self._reserve = reserve
        addr = self._libc.mmap(None, reserve, _PROT_RW, _MAP_PRIVATE_ANON_NORESERVE, -1, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the emulation ballast failed")
        self.address: int | None = addr
        self._libc.madvise(addr, reserve, _MADV_NOHUGEPAGE)
        self.pages = 0
        """Pages of the ballast that are resident: its first ``pages`` pages, no others."""
        self.high = 0
        """The most pages ever resident (beyond them nothing was ever touched)."""

    @property
    def size(self) -> int:
        """Bytes of the ballast that are resident."""
        return self.pages * PAGE

    def touch(self, pages: int) -> None:
        """Make ``pages`` more pages of the ballast resident."""
        if pages <= 0:
            return
        if (self.pages + pages) * PAGE > self._reserve:
            raise MemoryError("emulation ballast reservation exhausted")
        ctypes.memset(self.address + self.pages * PAGE, 1, pages * PAGE)
        self.pages += pages
        self.high = max(self.high, self.pages)

    def release(self, pages: int) -> int:
        """Drop up to ``pages`` resident pages of the ballast; the number dropped."""
        pages = min(max(pages, 0), self.pages)
        if pages:
            self.pages -= pages
            drop(self.address + self.pages * PAGE, pages)
        return pages

    def close(self) -> None:
        if self.address is not None:
            self._libc.munmap(self.address, self._reserve)
            self.address, self.pages = None, 0
