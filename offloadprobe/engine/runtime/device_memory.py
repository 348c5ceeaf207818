"""The emulated device's memory in CPU emulation: a registry of device storages and a ballast.

On a GPU host, device memory is not in the process's RSS. In CPU emulation it is, so
without care a host allocation made right after a device free (or right before a device
restore) reuses the RSS the device gave up and the kernel's high-water mark never sees it.

Design, true by construction: the RSS held by emulated device storages plus the RSS of a
ballast arena (an anonymous mapping outside every allocator) is kept CONSTANT. Whenever
device memory is freed, the ballast is touched by exactly the RSS the free returned
(measured from ``/proc/self/statm`` around the free); before device memory is allocated,
ballast is released first, then the storage is allocated and touched (as ``cudaMalloc``
makes memory resident), and any difference is settled against the ballast. The host's own
bytes are therefore always ``RSS - constant`` and a phase's host peak is
``VmHWM - constant``. The constant only grows, when the device needs more than it ever
held; the grow callback lets the host probe split its VmHWM interval there.

Every device storage is held here by a strong reference, so nothing can free device memory
behind the meter's back; a storage nobody else references any more is freed (with ballast
compensation) at :meth:`DeviceMemory.reclaim`, which the runtime calls at phase boundaries,
as a GPU allocator frees a tensor nobody references.

glibc's mmap threshold is fixed at 128 KiB so that freeing any storage of that size or more
really returns its pages to the kernel (glibc otherwise raises the threshold after the first
large free and keeps later frees in its heap).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import os
from collections.abc import Callable
from typing import Any

import torch

PAGE = mmap.PAGESIZE
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024
_MADV_DONTNEED = 4
_MADV_NOHUGEPAGE = 15
_PROT_RW = 0x1 | 0x2
_MAP_PRIVATE_ANON_NORESERVE = 0x02 | 0x20 | 0x4000
_RESERVE = 1 << 40  # virtual address space for the ballast; NORESERVE: no commit charge

_ORIGINAL_RESIZE = torch.UntypedStorage.resize_


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """glibc, loaded once (``find_library`` runs ``ldconfig`` every time it is asked)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def rss() -> int:
    """Resident bytes of this process right now (``/proc/self/statm``)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def fix_malloc_threshold() -> bool:
    """Pin glibc's mmap threshold so large frees return memory to the kernel."""
    try:
        return bool(_libc().mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


_NONE: frozenset[int] = frozenset()


def _pages(nbytes: int) -> int:
    return -(-nbytes // PAGE) * PAGE


class Ballast:
    """Resident filler pages in one private anonymous mapping: a touched prefix that grows
    (``memset``) and shrinks (``madvise(MADV_DONTNEED)``) by whole pages."""

    def __init__(self, reserve: int = _RESERVE) -> None:
        self._libc = _libc()
        self._reserve = reserve
        addr = self._libc.mmap(None, reserve, _PROT_RW, _MAP_PRIVATE_ANON_NORESERVE, -1, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the emulation ballast failed")
        self._addr = addr
        self._libc.madvise(addr, reserve, _MADV_NOHUGEPAGE)
        self.size = 0
        """Bytes of the ballast that are resident (page multiples)."""

    def touch(self, nbytes: int) -> None:
        """Make ``nbytes`` (rounded down to pages) more of the ballast resident."""
        nbytes = nbytes // PAGE * PAGE
        if nbytes <= 0:
            return
        if self.size + nbytes > self._reserve:
            raise MemoryError("emulation ballast reservation exhausted")
        ctypes.memset(self._addr + self.size, 1, nbytes)
        self.size += nbytes

    def release(self, nbytes: int) -> int:
        """Drop up to ``nbytes`` (rounded up to pages) of resident ballast; bytes dropped."""
        nbytes = min(_pages(max(nbytes, 0)), self.size)
        if nbytes:
            self.size -= nbytes
            self._libc.madvise(self._addr + self.size, nbytes, _MADV_DONTNEED)
        return nbytes

    def close(self) -> None:
        if self._addr is not None:
            self._libc.munmap(self._addr, self._reserve)
            self._addr, self.size = None, 0


class DeviceMemory:
    """Every emulated device storage, held strongly, and the ballast that keeps
    ``device RSS + ballast`` constant."""

    def __init__(self) -> None:
        self.ballast = Ballast()
        self._storages: dict[int, torch.UntypedStorage] = {}
        self.constant = 0
        """Device RSS + ballast RSS: what every host figure subtracts from RSS."""
        self.freed_bytes = 0
        """Cumulative device bytes freed (storage sizes), for measured transfers."""
        self.allocated_bytes = 0
        """Cumulative device bytes allocated or restored (storage sizes)."""
        self.on_grow: Callable[[], None] | None = None
        """Called just before the constant grows (the host probe splits its interval)."""
        self.on_grown: Callable[[], None] | None = None
        """Called right after the constant grew."""
        self._seen: dict[int, tuple[int, int]] = {}
        """Each device storage's (size, address) when this registry last changed it: a
        resize behind the registry changes the size, a free and regrowth the address."""
        self.bypassed_bytes = 0
        """Cumulative device bytes resized behind the registry (:meth:`reconcile`)."""

    # -- facts ---------------------------------------------------------------------------
    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s storage is emulated device memory (allocated or freed)."""
        return tensor.untyped_storage()._cdata in self._storages

    def holds_storage(self, storage: torch.UntypedStorage) -> bool:
        return storage._cdata in self._storages

    def resident(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` occupies emulated device memory right now."""
        storage = tensor.untyped_storage()
        return storage._cdata in self._storages and storage.nbytes() > 0

    def device_bytes(self) -> int:
        """Bytes of every allocated device storage (what ``memory_allocated`` would say)."""
        return sum(s.nbytes() for s in self._storages.values())

    def storages(self) -> list[torch.UntypedStorage]:
        return list(self._storages.values())

    # -- allocation ------------------------------------------------------------------------
    def _settle(self, before: int, released: int, grew: bool) -> None:
        """After an allocation: balance RSS change against the ballast released for it."""
        added = rss() - before + released  # RSS the allocation itself made resident
        if added > released:
            self.constant += added - released
            if grew and self.on_grown is not None:
                self.on_grown()
        else:
            self.ballast.touch(released - added)

    def allocate(
        self, nbytes: int, make: Callable[[], Any], *, touch: bool, exclude: frozenset[int] = _NONE
    ) -> Any:
        """Run ``make`` (which allocates ``nbytes`` of device storage) cudaMalloc-like:
        ballast released first, the result's storages registered and (``touch``) made
        resident. Storages in ``exclude`` (the op's inputs) are not the op's to register."""
        need = _pages(nbytes)
        grew = need > self.ballast.size
        if grew and self.on_grow is not None:
            self.on_grow()
        before = rss()
        released = self.ballast.release(need)
        result = make()
        for storage in _storages_of(result):
            if storage._cdata not in self._storages and storage._cdata not in exclude:
                self._register(storage)
                if touch:
                    _touch(storage)
        self._settle(before, released, grew)
        return result

    def _register(self, storage: torch.UntypedStorage) -> None:
        self._storages[storage._cdata] = storage
        self._seen[storage._cdata] = (storage.nbytes(), storage.data_ptr())
        self.allocated_bytes += storage.nbytes()

    def adopt(self, result: Any, exclude: frozenset[int] = _NONE) -> Any:
        """Register storages already allocated and written (their size was unknown
        beforehand): ballast is released after the fact, so the phase's high-water mark may
        carry them once. Used only for device results of ops the emulation cannot size."""
        fresh = [
            s
            for s in _storages_of(result)
            if s._cdata not in self._storages and s._cdata not in exclude
        ]
        for storage in fresh:
            self._register(storage)
        need = sum(_pages(s.nbytes()) for s in fresh)
        released = self.ballast.release(need)
        self.constant += need - released
        return result

    def resize(self, storage: torch.UntypedStorage, size: int) -> Any:
        """``UntypedStorage.resize_`` of a device storage: a free or a (re)allocation."""
        result = self._resize(storage, size)
        self._seen[storage._cdata] = (storage.nbytes(), storage.data_ptr())
        return result

    def _resize(self, storage: torch.UntypedStorage, size: int) -> Any:
        old = storage.nbytes()
        if size == old:
            return _ORIGINAL_RESIZE(storage, size)
        if size < old:
            before = rss()
            result = _ORIGINAL_RESIZE(storage, size)
            self.ballast.touch(before - rss())
            self.freed_bytes += old - size
            return result

        def grow() -> Any:
            out = _ORIGINAL_RESIZE(storage, size)
            if old == 0:
                _touch(storage)
            else:
                _touch(storage, start=old)
            return out

        need = _pages(size - old)
        grew = need > self.ballast.size
        if grew and self.on_grow is not None:
            self.on_grow()
        before = rss()
        released = self.ballast.release(need)
        result = grow()
        self.allocated_bytes += size - old
        self._settle(before, released, grew)
        return result

    # -- reclaim ---------------------------------------------------------------------------
    def reclaim(self) -> int:
        """Free every device storage that only this registry still references; bytes freed."""
        freed = 0
        for key, storage in list(self._storages.items()):
            if torch._C._storage_Use_Count(key) <= 1:
                freed += storage.nbytes()
                if storage.nbytes():
                    self.resize(storage, 0)
                del self._storages[key]
                self._seen.pop(key, None)
        return freed

    def reconcile(self) -> int:
        """Device bytes resized behind this registry (through ``torch._C.StorageBase.resize_``
        or a C++ op, never through the patched ``UntypedStorage.resize_``), now counted: a
        shrink as a free with ballast in its place, a growth as an allocation. The RSS the
        change moved was not compensated when it happened: the caller says so."""
        changed = 0
        for key, storage in self._storages.items():
            now, address = storage.nbytes(), storage.data_ptr()
            was, was_at = self._seen.get(key, (now, address))
            if (now, address) == (was, was_at):
                continue
            self._seen[key] = (now, address)
            if now == was:  # freed and grown again behind the registry
                changed += now
                continue
            changed += abs(now - was)
            if now < was:
                self.freed_bytes += was - now
                self.ballast.touch(_pages(was) - _pages(now))
            else:
                self.allocated_bytes += now - was
                need = _pages(now) - _pages(was)
                self.constant += need - self.ballast.release(need)
        self.bypassed_bytes += changed
        return changed

    def close(self) -> None:
        self._storages.clear()
        self.ballast.close()


def _storages_of(result: Any) -> list[torch.UntypedStorage]:
    tensors = result if isinstance(result, (list, tuple)) else [result]
    found = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and not t.is_meta:
            found.append(t.untyped_storage())
        elif isinstance(t, torch.UntypedStorage):
            found.append(t)
    return found


def _touch(storage: torch.UntypedStorage, start: int = 0) -> None:
    """Make a fresh storage resident as cudaMalloc'd memory is (contents are undefined)."""
    n = storage.nbytes() - start
    if n > 0:
        ctypes.memset(storage.data_ptr() + start, 0, n)


def environment_ok() -> bool:
    """Whether /proc/self/statm exists (Linux): the design needs it."""
    return os.path.exists("/proc/self/statm")
