"""A process forked from a pre-imported interpreter, made a fresh interpreter's equal.

Both the zygote (``engine.zygote``: CPU-emulation workers) and our launcher of ranks
(``engine.world.forked``) fork processes that must hold what a fresh
``python -m offloadprobe.engine.worker`` would hold, so that every host figure of theirs
reads as a fresh one's. This module has what both need:

- ``preload``: what every CPU-emulation worker imports, imported once before forking;
- ``die_with_parent``: the child is killed when its parent ends (``PR_SET_PDEATHSIG``);
- ``zero_pfns``, ``shared_runs``, ``present_runs``, ``unshare_pages``: every page the
  child still shares copy-on-write made its own, and every file page its parent's imports
  mapped mapped here too, read from ``/proc/PID/pagemap`` (which needs page frame
  numbers: ``zero_pfns`` reads zeros where the kernel hides them).

It imports no torch at import time.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

PAGE = mmap.PAGESIZE
_PRESENT = 1 << 63
_FILE_OR_SHARED = 1 << 61
_EXCLUSIVE = 1 << 56
_PFN = (1 << 55) - 1
_PR_SET_PDEATHSIG = 1


def preload(engine: str | None = None) -> None:
    """What every CPU-emulation worker imports, imported once (the zygote's work, and a
    launcher's before it forks its ranks), beside the worker module itself: its caller's
    (the zygote imports it; a launcher runs in it)."""
    from offloadprobe.core import collector
    from offloadprobe.core.chatter import quiet_third_party

    quiet_third_party()  # before megatron-core's imports (a launcher's stderr is the user's)
    collector.pause_for_imports()
    import torch  # noqa: F401

    from offloadprobe.engine.runner import run  # noqa: F401
    from offloadprobe.engine.runtime.eager import eager_fusions
    from offloadprobe.engine.runtime.imports import import_run_modules

    eager_fusions()
    import_run_modules(engine)  # the engine's modules: a zygote serves one engine
    collector.resume(freeze=True)


def die_with_parent() -> None:
    """In a child: be SIGKILLed when the parent ends (Linux ``PR_SET_PDEATHSIG``); for the
    zygote, its workers, and every worker and zygote the parent starts."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def mappings() -> list[tuple[int, int, str, bool]]:
    """The process's mappings: (start, end, permissions, file-backed)."""
    found = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        found.append((start, end, fields[1], bool(path) and not path.startswith("[")))
    return found


def _entry(pagemap: Any, address: int) -> int:
    pagemap.seek(address // PAGE * 8)
    return int.from_bytes(pagemap.read(8), "little")


def zero_pfns() -> tuple[int, int, int]:
    """The kernel's shared zero page and huge zero page, as page frame numbers: (zero
    page, first and end of the huge one; the same as the zero page where THP maps none).
    Zeros where the kernel hides page frame numbers (no ``CAP_SYS_ADMIN``)."""
    huge = 2 << 20
    area = mmap.mmap(-1, 2 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        aligned = -(-base // huge) * huge
        _ = area[0]
        with contextlib.suppress(OSError, AttributeError):  # THP off: no huge zero page
            area.madvise(mmap.MADV_HUGEPAGE, aligned - base, huge)
        _ = area[aligned - base]
        with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
            small = _entry(pagemap, base) & _PFN
            head = _entry(pagemap, aligned) & _PFN
    finally:
        with contextlib.suppress(BufferError):
            area.close()
    if head == small:
        return small, small, small + 1
    return small, head, head + huge // PAGE


def shared_runs(entries: np.ndarray, zero: tuple[int, int, int]) -> list[tuple[int, int]]:
    """Runs of pages, as (first page, pages), whose ``/proc/PID/pagemap`` entries say
    present, anonymous, not exclusively mapped and not the kernel's zero page (``zero``,
    from ``zero_pfns``): the pages shared copy-on-write."""
    import numpy as np

    present = (entries & np.uint64(_PRESENT)) != 0
    mask = present & ((entries & np.uint64(_FILE_OR_SHARED | _EXCLUSIVE)) == 0)
    pfn = entries & np.uint64(_PFN)
    small, first, end = (np.uint64(x) for x in zero)
    mask &= (pfn != small) & ((pfn < first) | (pfn >= end))
    return _runs(mask)


def unshare_pages(zero: tuple[int, int, int], zygote: int) -> int:
    """Make this worker's memory what a fresh interpreter's would be after the same
    imports; the pages that took. Every page it shares copy-on-write with ``zygote`` (the
    process it was forked from: the zygote, or a launcher for its ranks) is
    copied (``MADV_POPULATE_WRITE`` writes nothing: each page keeps its bytes), and every
    page of a file mapping the zygote has mapped is mapped here too (``fork`` copies no
    page table entries of a file mapping without private pages: the first touch of
    torch's code in a phase would otherwise fault it in, in view of that phase's RSS).
    Pages that map the zero page stay as they are: made resident they would hold RSS a
    fresh interpreter does not, and a later allocation there would fault nothing in.
    Private mappings this process may not write (a library's relocated read-only data,
    ``r--p``: megabytes of torch's) hold such pages too: each is written back with its own
    bytes through ``/proc/self/mem``, which copies it as a debugger's write would."""
    import numpy as np

    from offloadprobe.engine.runtime.host_pages import populate, populate_read

    done = 0
    with (
        open("/proc/self/pagemap", "rb", buffering=0) as mine,
        open(f"/proc/{zygote}/pagemap", "rb", buffering=0) as theirs,
        open("/proc/self/mem", "r+b", buffering=0) as memory,
    ):
        for start, end, perms, file_backed in mappings():
            pages = (end - start) // PAGE
            if perms[3] == "p" and (perms[1] == "w" or perms[0] == "r"):
                mine.seek(start // PAGE * 8)
                entries = np.frombuffer(mine.read(pages * 8), dtype=np.uint64)
                for first, count in shared_runs(entries, zero):
                    with contextlib.suppress(OSError):  # a mapping gone meanwhile
                        address = start + first * PAGE
                        if perms[1] == "w":
                            populate(address, count)
                        else:
                            _rewrite(memory, address, count)
                        done += count
            if file_backed and perms.startswith("r"):
                theirs.seek(start // PAGE * 8)
                entries = np.frombuffer(theirs.read(pages * 8), dtype=np.uint64)
                for first, count in present_runs(entries):
                    with contextlib.suppress(OSError):
                        populate_read(start + first * PAGE, count)
                        done += count
    return done


def _rewrite(memory: Any, address: int, count: int) -> None:
    """Write ``count`` pages from ``address`` back with their own bytes through
    ``/proc/self/mem`` (``memory``): a private mapping's shared pages become this
    process's own copies even where the mapping is not writable."""
    data = os.pread(memory.fileno(), count * PAGE, address)
    if os.pwrite(memory.fileno(), data, address) != len(data):
        raise OSError("short write to /proc/self/mem")


def present_runs(entries: np.ndarray) -> list[tuple[int, int]]:
    """Runs of pages, as (first page, pages), whose pagemap entries say present."""
    import numpy as np

    return _runs((entries & np.uint64(_PRESENT)) != 0)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    import numpy as np

    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]
