"""A count bumped around every change of pages that are not the host's own, for samplers.

CPU emulation keeps its device pages plus a ballast constant in RSS, but not at every
instant: a free drops the storage's pages, then touches as many ballast pages; an
allocation releases ballast, then makes the storage's pages resident. Between the two,
RSS is neither the state before nor the one after (a 96 MiB grad buffer freed read as
-2.8x of the payload on a compare plot). The exact figures never see this (the registry's
counts, taken at rest); a sampler reading ``/proc`` a thousand times a second does.

So the registry brackets each change: ``begin`` makes the count odd, ``end`` even again
(nested changes count once). While a sampler runs, the count lives in a shared 8-byte
file: the sampling process reads it before and after each sample and leaves out a sample
that began during a change or overlapped one, as a seqlock reader retries. Callers hold
their own lock around ``begin``/``end`` (the registry's), so the count has one writer.
"""

from __future__ import annotations

import mmap
import os
import struct

COUNT = struct.Struct("<Q")


class PageChanges:
    """The count, in this process and, while shared, in a file a sampler maps."""

    def __init__(self) -> None:
        self.value = 0
        self._depth = 0
        self._shared: mmap.mmap | None = None

    def begin(self) -> None:
        self._depth += 1
        if self._depth == 1:
            self._bump()

    def end(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._bump()

    def _bump(self) -> None:
        self.value += 1
        if self._shared is not None:
            COUNT.pack_into(self._shared, 0, self.value)

    def share(self, path: str) -> None:
        """Publish the count in ``path`` (created, 8 bytes) until :meth:`unshare`."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, COUNT.size)
            self._shared = mmap.mmap(fd, COUNT.size)
        finally:
            os.close(fd)
        COUNT.pack_into(self._shared, 0, self.value)

    def unshare(self) -> None:
        if self._shared is not None:
            self._shared.close()
            self._shared = None


CHANGES = PageChanges()
"""This process's count (one registry of emulated device memory per process)."""
