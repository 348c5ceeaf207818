"""The emulated device's memory in CPU emulation: a registry of device storages and a ballast.

On a GPU host, device memory is not in the process's RSS. In CPU emulation it is, so
without care a host allocation made right after a device free (or right before a device
restore) reuses the RSS the device gave up and the kernel's high-water mark never sees it.

Design, true by construction: the pages that emulated device storages own (the pages
wholly inside a storage, ``host_pages``) are all resident and counted, and so are the
resident pages of a ballast (an anonymous mapping outside every allocator);

    constant = pages owned by device storages + ballast pages

and the registry changes the two counts only together, by the same number of pages, so
the constant stays put. Every page it counts is resident and private to its storage or
to the ballast, so ``RSS - constant`` counts only other pages: the host's own bytes, never
negative. A phase's host peak is ``VmHWM - constant``. The counts are the registry's own,
never a reading of process-wide RSS (``/proc/self/statm`` around a free moves with every
page fault any other thread takes meanwhile: with a host copy made on a worker thread
while the main thread freed, steady figures read from -0.43x to 1.04x of a true 1x):

- allocation: the ballast is released first by the most pages the new storages can own
  (``nbytes // PAGE``), the op runs, each new storage's owned pages are made resident
  (``MADV_POPULATE_WRITE``; an unwritten allocation is zero-filled, as ``cudaMalloc``
  makes memory resident) and counted; the ballast takes back what they did not need, and
  the constant grows by what it could not give. The grow callbacks let the host probe
  split its VmHWM interval there.
- free: the storage's owned pages are dropped (``MADV_DONTNEED``) while the storage still
  owns them, then torch frees it, then the ballast is touched by exactly those pages.
  Whether the storage was its own mmap or lay in glibc's heap (a free chunk keeps its
  pages resident, and a large storage can come from the heap when free heap space
  serves it), its owned pages have left RSS, and a host allocation that reuses the
  address faults them in again, in view of the high-water mark.

Why not count with ``mincore`` before and after a free instead: after a heap free the
pages stay resident (the heap's, not the device's), and after a ``munmap`` another thread
may map the range again before the second look. Dropping pages while they are still the
storage's needs no second look. ``mincore`` checks the counts instead: :meth:`reconcile`
finds owned pages no longer resident (freed and regrown behind the registry at the same
address, or swapped out) and the tests check the invariant page by page.

Limits: the (at most two) pages at a storage's ends may be shared with its heap
neighbours or hold glibc's chunk header: they are host pages in every figure (a storage
under one page owns none; one under two pages may own one), at most 8 KiB per live
device storage, and stay host pages in
the heap after the free. Torch reallocates a storage grown from a non-zero size or shrunk
to one and frees the old memory itself: a heap storage's old pages then stay in the heap
as host pages (reading high by up to its old size, never low). A change behind the
registry (``torch._C.StorageBase.resize_``) is counted at the next :meth:`reconcile`, not
compensated when it happened; a free and regrowth there to the same address and size is
found only where it left owned pages unwritten (a heap chunk handed straight back keeps
its pages resident: not found, and the counts stay right). Transparent huge pages may
make untouched pages resident: outside owned pages they are host pages, the ballast has
them off. Swap would take counted pages out of RSS; the hosts this runs on have none.
Every operation holds one lock: a strategy's threads may allocate and free device memory
at once.

Every device storage is held here by a strong reference, so nothing can free device memory
behind the meter's back; a storage nobody else references any more is freed (with ballast
compensation) at :meth:`DeviceMemory.reclaim`, which the runtime calls at phase boundaries,
as a GPU allocator frees a tensor nobody references.

glibc's malloc serves device storages and host copies alike (``glibc_malloc``: its own
dynamic mmap threshold by default). A device allocation can get a heap block a host free
left with its pages resident: on a GPU those pages would still be host memory. Where the
block is not yet written when it is registered (a factory such as ``torch.empty``, a
``resize_`` that grows), pages found resident (``mincore``) stay host pages: left out of
the constant, never dropped (``Held.host``). Where the op wrote the block as it made it
(a copy to the device), that cannot be told: its pages count as device pages and
:class:`Recycling` tallies the bytes; a block that is a mapping of its own is fresh.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from offloadprobe.engine.runtime.emulated_ops import local
from offloadprobe.engine.runtime.host_pages import (
    PAGE,
    Ballast,
    drop_except,
    glibc_mapped,
    owned_pages,
    populate,
    residency,
    resident,
)
from offloadprobe.measure.page_changes import CHANGES

_ORIGINAL_RESIZE = torch.UntypedStorage.resize_


def rss() -> int:
    """Resident bytes of this process right now (``/proc/self/statm``)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


_NONE: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True, slots=True)
class Held:
    """A device storage as the registry last changed it: its bytes, where they were, and
    the pages they own (all resident; counted in the constant but for ``host``'s)."""

    size: int
    address: int
    start: int
    """First owned page."""
    pages: int
    """Owned pages counted in the constant (device pages)."""
    total: int = -1
    """Every owned page; -1: ``pages``."""
    host: bytes | None = None
    """Per owned page, 1 for one that was already resident when the storage got it: a free
    glibc heap page a host free left (on a GPU it would still be resident host memory).
    Left out of the constant and never dropped, it stays a host page throughout."""

    @property
    def owned(self) -> int:
        return self.pages if self.total < 0 else self.total


@dataclass(kw_only=True, slots=True)
class Recycling:
    """Free host heap pages device allocations took (glibc's own malloc serves both)."""

    kept_bytes: int = 0
    """Found already resident and kept as host pages (measured: the allocation was not yet
    written, ``mincore``)."""
    unmeasured_bytes: int = 0
    """Heap pages an op wrote as it made them (a copy to the device): whether they were
    resident before cannot be told; counted as device pages (host figures may read low by
    up to these). Mapped blocks (``glibc_mapped``) are fresh and never counted here."""
    by_strategy: bool = False
    """True while strategy code runs: only then is ``unmeasured_bytes`` tallied."""


def _take(
    storage: torch.UntypedStorage, *, touch: bool, start: int = 0, seen: Recycling | None = None
) -> Held:
    """Make ``storage``'s owned pages resident (``touch``: zero its bytes from ``start``, as
    cudaMalloc'd memory is resident with undefined contents) and say what it holds. Pages
    of an unwritten heap block (from ``start`` where ``touch``) that were resident already
    stay host pages (``Held.host``)."""
    address, size = storage.data_ptr(), storage.nbytes()
    first, pages = owned_pages(address, size)
    host = None
    if seen is not None and pages and glibc_mapped(address) is not True:
        written = min(pages, max(0, -(-(address + start) // PAGE) * PAGE - first) // PAGE)
        if not touch:
            written = pages
        if touch and written < pages:
            host = bytes(written) + residency(first + written * PAGE, pages - written)
            kept = host.count(1)
            host = host if kept else None
            seen.kept_bytes += kept * PAGE
        if written and seen.by_strategy:
            seen.unmeasured_bytes += written * PAGE
    if touch and size > start:
        ctypes.memset(address + start, 0, size - start)
    if not (touch and start == 0):
        populate(first, pages)
    if host is None:
        return Held(size=size, address=address, start=first, pages=pages)
    counted = pages - host.count(1)
    return Held(size=size, address=address, start=first, pages=counted, total=pages, host=host)


class _Changing:
    """``with``: hold ``lock`` and mark a page change for samplers (odd count) meanwhile."""

    __slots__ = ("lock",)

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        self.lock.acquire()
        CHANGES.begin()

    def __exit__(self, *exc: object) -> None:
        CHANGES.end()
        self.lock.release()


class DeviceMemory:
    """Every emulated device storage, held strongly, and the ballast that keeps
    ``device pages + ballast pages`` constant."""

    def __init__(self) -> None:
        self.ballast = Ballast()
        self._storages: dict[int, torch.UntypedStorage] = {}
        self._held: dict[int, Held] = {}
        self.device_pages = 0
        """Pages owned by device storages (each storage's :class:`Held` ``pages``)."""
        self.freed_bytes = 0
        """Cumulative device bytes freed (storage sizes), for measured transfers."""
        self.allocated_bytes = 0
        """Cumulative device bytes allocated or restored (storage sizes)."""
        self.on_grow: Callable[[], None] | None = None
        """Called just before the constant grows (the host probe splits its interval)."""
        self.on_grown: Callable[[], None] | None = None
        """Called right after the constant grew."""
        self.bypassed_bytes = 0
        """Cumulative device bytes changed behind the registry (:meth:`reconcile`)."""
        self.recycling = Recycling()
        """Free host heap pages device allocations took (see :class:`Recycling`)."""
        self.lock = threading.RLock()
        """Held by every registry operation (a strategy's threads may allocate and free at
        once); hold it to see the two counts at rest."""
        self.changing = _Changing(self.lock)
        """The lock, with the page-change count bumped around it (``measure.page_changes``):
        entered by every operation that moves device or ballast pages."""

    @property
    def constant(self) -> int:
        """Bytes of the pages device storages own plus the ballast's: what every host figure
        subtracts from RSS (read at rest: never halfway through another thread's change)."""
        with self.lock:
            return (self.device_pages + self.ballast.pages) * PAGE

    # -- facts ---------------------------------------------------------------------------
    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s storage is emulated device memory (allocated or freed)."""
        return local(tensor).untyped_storage()._cdata in self._storages

    def holds_storage(self, storage: torch.UntypedStorage) -> bool:
        """Whether ``storage`` is emulated device memory (allocated or freed)."""
        return storage._cdata in self._storages

    def resident(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` occupies emulated device memory right now."""
        storage = local(tensor).untyped_storage()
        return storage._cdata in self._storages and storage.nbytes() > 0

    def held_in_python(self) -> dict[int, int]:
        """``{key: bytes}`` of allocated device storages whose Python object something
        besides this registry holds (a bare ``UntypedStorage`` kept by user code)."""
        with self.lock:
            held = {}
            for key in list(self._storages):
                storage = self._storages[key]
                if storage.nbytes() and _refs(storage) > _REGISTRY_REFS:
                    held[key] = storage.nbytes()
            return held

    def device_bytes(self) -> int:
        """Bytes of every allocated device storage (what ``memory_allocated`` would say)."""
        return sum(s.nbytes() for s in self._storages.values())

    def storages(self) -> list[torch.UntypedStorage]:
        return list(self._storages.values())

    # -- the two counts ------------------------------------------------------------------
    def _hold(self, key: int, held: Held) -> None:
        was = self._held.get(key)
        self.device_pages += held.pages - (was.pages if was is not None else 0)
        self._held[key] = held

    def _settle(self, spare: int, grew: bool) -> None:
        """After a change: ``spare`` pages the ballast gives back (taken where negative:
        first from the ballast, the rest grows the constant)."""
        if spare >= 0:
            self.ballast.touch(spare)
        else:
            self.ballast.release(-spare)  # what it cannot give grows the constant
        if grew and self.on_grown is not None:
            self.on_grown()

    def _release_for(self, need: int) -> tuple[int, bool]:
        """Release ballast for ``need`` pages about to be made resident; (released, whether
        the constant will grow), the host probe told first where it will."""
        grew = need > self.ballast.pages
        if grew and self.on_grow is not None:
            self.on_grow()
        return self.ballast.release(need), grew

    # -- allocation ----------------------------------------------------------------------
    def allocate(
        self, nbytes: int, make: Callable[[], Any], *, touch: bool, exclude: frozenset[int] = _NONE
    ) -> Any:
        """Run ``make`` (which allocates ``nbytes`` of device storage) cudaMalloc-like:
        ballast released first, the result's storages registered and their owned pages
        made resident (``touch``: zero-filled). Storages in ``exclude`` (the op's inputs)
        are not the op's to register."""
        with self.changing:
            released, grew = self._release_for(max(nbytes, 0) // PAGE)
            try:
                result = make()
            except BaseException:
                self._settle(released, grew)  # nothing was made
                raise
            taken = 0
            for storage in _storages_of(result):
                if storage._cdata not in self._storages and storage._cdata not in exclude:
                    taken += self._register(storage, touch=touch).pages
            self._settle(released - taken, grew)
            return result

    def _register(self, storage: torch.UntypedStorage, *, touch: bool) -> Held:
        self._storages[storage._cdata] = storage
        held = _take(storage, touch=touch, seen=self.recycling)
        self._hold(storage._cdata, held)
        self.allocated_bytes += storage.nbytes()
        return held

    def adopt(self, result: Any, exclude: frozenset[int] = _NONE) -> Any:
        """Register storages already allocated and written (their size was unknown
        beforehand): ballast is released after the fact, so the phase's high-water mark may
        carry them once. Used only for device results of ops the emulation cannot size."""
        with self.changing:
            fresh = [
                s
                for s in _storages_of(result)
                if s._cdata not in self._storages and s._cdata not in exclude
            ]
            taken = sum(self._register(s, touch=False).pages for s in fresh)
            self._settle(-taken, grew=False)
            return result

    def resize(self, storage: torch.UntypedStorage, size: int) -> Any:
        """``UntypedStorage.resize_`` of a device storage: a free or a (re)allocation."""
        with self.changing:
            key = storage._cdata
            self.bypassed_bytes += self._reconcile(key, storage)  # its pages are its own
            old = storage.nbytes()
            if size == old or not storage.resizable():
                return _ORIGINAL_RESIZE(storage, size)  # a no-op, or torch's own error
            held = self._held[key]
            if size < old:  # the pages past the new end are discarded: drop them, still owned
                cut, count = owned_pages(held.address + size, old - size)
                drop_except(cut, count, held.host, (cut - held.start) // PAGE)
            released, grew = self._release_for(size // PAGE)  # torch allocates anew
            try:
                result = _ORIGINAL_RESIZE(storage, size)
            finally:  # (where torch failed, the storage is as it was, its pages resident again)
                grown = storage.nbytes() > old
                now = _take(storage, touch=grown, start=old, seen=self.recycling if grown else None)
                self._hold(key, now)
                self._settle(released + held.pages - now.pages, grew)
            if size < old:
                self.freed_bytes += old - size
            else:
                self.allocated_bytes += size - old
            return result

    # -- reclaim ---------------------------------------------------------------------------
    def reclaim(self) -> int:
        """Free every device storage that only this registry still references; bytes freed."""
        with self.changing:
            freed = 0
            for key in list(self._storages):
                storage = self._storages[key]  # a user's storage object stays: see _refs
                if torch._C._storage_Use_Count(key) <= 1 and _refs(storage) <= _REGISTRY_REFS:
                    freed += storage.nbytes()
                    if storage.nbytes():
                        self.resize(storage, 0)
                    del self._storages[key]
                    self.device_pages -= self._held.pop(key).pages
            return freed

    def reconcile(self) -> int:
        """Device bytes changed behind this registry (through ``torch._C.StorageBase.resize_``
        or a C++ op, never through the patched ``UntypedStorage.resize_``), now counted: a
        change of size or address as torch's free and allocation (the new memory's owned
        pages made resident and counted), owned pages no longer resident (a free and
        regrowth at the same address and size, or swap) made resident again. The RSS the
        change moved was not compensated when it happened: the caller says so."""
        with self.changing:
            changed = sum(self._reconcile(k, s) for k, s in self._storages.items())
            for key, held in self._held.items():
                missing = held.owned - resident(held.start, held.owned)
                if missing:
                    populate(held.start, held.owned)  # as counted again
                    changed += self._storages[key].nbytes()
            self.bypassed_bytes += changed
            return changed

    def _reconcile(self, key: int, storage: torch.UntypedStorage) -> int:
        """Count a change of ``storage``'s size or address behind the registry; its bytes."""
        held = self._held[key]
        now, address = storage.nbytes(), storage.data_ptr()
        if (now, address) == (held.size, held.address):
            return 0
        # torch freed the old memory itself (its owned pages left RSS, or stayed in glibc's
        # heap as host pages) and allocated the new, counted from here on
        fresh = _take(storage, touch=False)
        self._hold(key, fresh)
        if now < held.size:
            self.freed_bytes += held.size - now
        elif now > held.size:
            self.allocated_bytes += now - held.size
        self._settle(held.pages - fresh.pages, grew=False)
        return now if now == held.size else abs(now - held.size)

    def close(self) -> None:
        with self.changing:
            self._storages.clear()
            self._held.clear()
            self.device_pages = 0
            self.ballast.close()


def _refs(storage: torch.UntypedStorage) -> int:
    """Python references to ``storage``'s one object (PyTorch keeps one per storage, so a
    bare ``t.untyped_storage()`` kept by user code is the registry's very object). Compare
    with ``_REGISTRY_REFS`` only where it is called as in ``_registry_refs``: from a loop
    over the registry's keys, the storage in one local variable."""
    return sys.getrefcount(storage)


def _registry_refs() -> int:
    """What ``_refs`` says of a storage only a registry holds (the dict, the caller's
    variable, the argument: the count varies by Python version), called the way
    ``DeviceMemory.reclaim`` and ``DeviceMemory.held_in_python`` call it."""
    registry = {0: torch.empty(1, dtype=torch.uint8).untyped_storage()}
    for key in list(registry):
        storage = registry[key]
        return _refs(storage)
    raise AssertionError("unreachable")


_REGISTRY_REFS = _registry_refs()


def _storages_of(result: Any) -> list[torch.UntypedStorage]:
    tensors = result if isinstance(result, (list, tuple)) else [result]
    found = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and not t.is_meta:
            found.append(local(t).untyped_storage())
        elif isinstance(t, torch.UntypedStorage):
            found.append(t)
    return found


def environment_ok() -> bool:
    """Whether /proc/self/statm exists (Linux, where mincore and madvise do too)."""
    return os.path.exists("/proc/self/statm")
