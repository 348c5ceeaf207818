"""Host memory at the page-locking ceiling: exact anonymous mappings, huge-page advice,
parallel first touch, release, residency, and ``cudaHostRegister`` through ctypes.

Nothing here imports torch: the OS calls go through libc and the CUDA runtime calls
through the ``libcudart`` that the process has loaded already (torch's own copy), so a
worker thread holds no GIL while the kernel faults pages in or the driver pins them.

Measured on the H200 (``/work/shared/reference``, 5 GiB): first touch after
``MADV_HUGEPAGE`` runs at 6.9 GB/s on one thread and 42 GB/s on 16, against 2.2 and 12 GB/s
with 4 KiB pages; ``cudaHostRegister`` of touched huge pages at 56 GB/s, of untouched memory
at 5.5 GB/s. Hence: map, advise huge pages, touch on many threads, register what is touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path

PAGE = mmap.PAGESIZE
MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
MADV_POPULATE_WRITE = 23  # Linux 5.14+
THP = Path("/sys/kernel/mm/transparent_hugepage")
TOUCH_METHODS = ("auto", "populate", "memset")
"""``populate``: ``madvise(MADV_POPULATE_WRITE)`` (the kernel faults and zeroes each page
once); ``memset``: write every byte (fault, then a second write); ``auto``: populate where
the kernel has it, else memset."""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP})
"""What a kernel or sandbox answers to an advice it does not implement."""


def page_round(nbytes: int, page: int = PAGE) -> int:
    """``nbytes`` rounded up to whole pages."""
    return -(-nbytes // page) * page


def huge_page_size() -> int:
    """The transparent huge page size (``hpage_pmd_size``; 2 MiB where it cannot be read)."""
    try:
        return int((THP / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 * 2**20


def thp_mode() -> str | None:
    """The selected word of ``transparent_hugepage/enabled`` (always, madvise, never);
    None where the kernel has no such file."""
    try:
        text = (THP / "enabled").read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def madvise(address: int, length: int, advice: int) -> int:
    """``madvise``; 0, or the errno the kernel refused it with."""
    if _libc.madvise(address, length, advice) == 0:
        return 0
    return ctypes.get_errno() or errno.EINVAL


@dataclass(frozen=True, kw_only=True, slots=True)
class Mapping:
    """One private anonymous mapping of exactly ``nbytes`` (whole pages)."""

    address: int
    length: int
    """Mapped bytes: ``nbytes`` rounded up to a page."""
    nbytes: int
    """Bytes the caller asked for."""
    huge_bytes: int
    """Bytes at the start advised ``MADV_HUGEPAGE`` (whole huge pages, aligned); the tail
    beyond them is advised ``MADV_NOHUGEPAGE``, so no huge page reaches past ``length``."""
    refused: str | None = None
    """Why huge pages were asked for and not granted (the run's note says so); None when
    granted or not asked for."""


def map_exact(nbytes: int, *, huge: bool) -> Mapping:
    """Map ``nbytes`` of private anonymous memory (no page resident yet).

    With ``huge``: the mapping starts on a huge-page boundary (a larger range is reserved,
    virtual only, and trimmed) and its whole huge pages are advised ``MADV_HUGEPAGE``.
    Where the kernel refuses the advice, the mapping is kept with 4 KiB pages and
    ``refused`` says why."""
    if nbytes <= 0:
        raise ValueError(f"cannot map {nbytes} bytes")
    length = page_round(nbytes)
    hpage = huge_page_size()
    address = _map(length + (hpage - PAGE if huge else 0))
    if huge:
        aligned = -(-address // hpage) * hpage
        if aligned > address:
            _unmap(address, aligned - address)
        end = address + length + hpage - PAGE
        if end > aligned + length:
            _unmap(aligned + length, end - (aligned + length))
        address = aligned
    if not huge:
        return Mapping(address=address, length=length, nbytes=nbytes, huge_bytes=0)
    refused = _refusal(thp_mode())
    huge_bytes = length // hpage * hpage
    if refused is None and huge_bytes:
        err = madvise(address, huge_bytes, MADV_HUGEPAGE)
        if err:
            refused = f"the kernel refused madvise(MADV_HUGEPAGE): {errno.errorcode.get(err, err)}"
    if refused is not None:
        huge_bytes = 0
    elif length > huge_bytes:
        madvise(address + huge_bytes, length - huge_bytes, MADV_NOHUGEPAGE)  # best effort
    return Mapping(
        address=address, length=length, nbytes=nbytes, huge_bytes=huge_bytes, refused=refused
    )


def _refusal(mode: str | None) -> str | None:
    if mode is None:
        return "the kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)"
    if mode == "never":
        return "transparent huge pages are off (transparent_hugepage/enabled: never)"
    return None


def _map(length: int) -> int:
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = _libc.mmap(None, length, prot, flags, -1, 0)
    if address in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"mmap of {length} bytes failed")
    return int(address)


def _unmap(address: int, length: int) -> None:
    if _libc.munmap(address, length) != 0:
        raise OSError(ctypes.get_errno(), f"munmap of {length} bytes at {address:#x} failed")


def unmap(mapping: Mapping) -> None:
    """Give the whole mapping back (nothing may use its addresses afterwards)."""
    _unmap(mapping.address, mapping.length)


def touch(address: int, length: int, method: str) -> str:
    """Fault in ``[address, address + length)`` (page-aligned); the method used.

    ``auto`` tries ``MADV_POPULATE_WRITE`` and writes every byte where the kernel does
    not know the advice (EINVAL; ENOSYS, EPERM or EOPNOTSUPP in a sandbox). Both release
    the GIL (a libc call through ctypes)."""
    if method in ("auto", "populate"):
        err = madvise(address, length, MADV_POPULATE_WRITE)
        if not err:
            return "populate"
        if method == "populate" or err not in _UNSUPPORTED:
            raise OSError(err, f"madvise(MADV_POPULATE_WRITE) of {length} bytes failed")
    elif method != "memset":
        raise ValueError(f"unknown touch method {method!r}: choose one of {TOUCH_METHODS}")
    _libc.memset(address, 0, length)
    return "memset"


def release(address: int, length: int) -> None:
    """Hand the pages of ``[address, address + length)`` back to the kernel
    (``MADV_DONTNEED``): RSS falls by them, the range stays mapped and reads as zeros."""
    err = madvise(address, length, MADV_DONTNEED)
    if err:
        raise OSError(err, f"madvise(MADV_DONTNEED) of {length} bytes failed")


def resident_bytes(address: int, length: int) -> int:
    """Bytes of the page-aligned range resident in memory now (``mincore``)."""
    pages = page_round(length) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    if _libc.mincore(address, pages * PAGE, vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(1 for v in bytes(vec) if v & 1) * PAGE


def plan_chunks(
    nbytes: int, chunk_bytes: int, first_bytes: int | None = None
) -> tuple[tuple[int, int], ...]:
    """``(offset, size)`` of each chunk of a ``nbytes`` range; together they tile it and
    the last one is short. Without ``first_bytes`` every chunk starts at a multiple of
    ``chunk_bytes``; with it the sizes ramp up, ``first_bytes`` doubling to
    ``chunk_bytes`` (a pipeline's first copy waits for one small chunk, not a whole one:
    on the H200 the bare pipeline's wait before its first copy fell from 17-37 ms to
    2-4 ms; ``benchmarks/results/h200-2026-12-03-first-offload-limits.json``)."""
    for size in (chunk_bytes, first_bytes or chunk_bytes):
        if size <= 0 or size % PAGE:
            raise ValueError(f"chunk size {size} is not a positive multiple of {PAGE}")
    out, offset, step = [], 0, min(first_bytes or chunk_bytes, chunk_bytes)
    while offset < nbytes:
        out.append((offset, min(step, nbytes - offset)))
        offset, step = offset + step, min(2 * step, chunk_bytes)
    return tuple(out)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_threads(cpus: int, local_ranks: int = 1, reserved: int = 2, spare: int = 2) -> int:
    """Touch threads for one process: its share of the CPUs (``local_ranks`` processes
    share them, after ``spare`` CPUs left to the node: the kernel's and the driver's own
    work, the measuring parent) less ``reserved`` (its thread issuing copies and its
    registering one). On the H200's 16 CPUs the bare pipeline read the same on 12 and on
    14 touch threads (medians 22.6 and 22.9 GB/s over three runs each) and less on 8
    (22.0); 12 keeps the registering thread, which bounds the pipeline, off a full machine
    (``benchmarks/results/h200-2026-12-03-first-offload-limits.json``)."""
    return max(1, (cpus - spare) // max(1, local_ranks) - reserved)


# ------------------------------------------------------------------ CUDA runtime


def loaded_library(name: str, maps: str | None = None) -> str | None:
    """The path of a loaded shared object whose file name starts with ``name``
    (from ``/proc/self/maps``, or the text given); None when none is loaded."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if Path(path).name.startswith(name):
            return path.strip()
    return None


class CudaError(RuntimeError):
    """A CUDA runtime call returned an error."""


class Cudart:
    """``cudaHostRegister``/``cudaHostUnregister``/``cudaEventSynchronize`` through ctypes,
    on the ``libcudart`` torch loaded (one runtime, one context), with the GIL released.

    Each calling thread is bound to ``device`` on its first call (the runtime's current
    device is per thread)."""

    PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context

    def __init__(self, device: int, path: str) -> None:
        self.device, self.path = device, path
        lib = ctypes.CDLL(path)
        lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
        lib.cudaSetDevice.argtypes = [ctypes.c_int]
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        self._lib = lib
        self._bound = threading.local()

    @classmethod
    def loaded(cls, device: int) -> Cudart | None:
        """The runtime this process loaded already; None where it is not a shared object."""
        path = loaded_library("libcudart.so")
        return cls(device, path) if path else None

    def _check(self, err: int, what: str) -> None:
        if err:
            text = self._lib.cudaGetErrorString(err) or b"?"
            raise CudaError(f"{what} failed: cudaError {err} ({text.decode()})")

    def bind(self) -> None:
        if not getattr(self._bound, "done", False):
            self._check(self._lib.cudaSetDevice(self.device), f"cudaSetDevice({self.device})")
            self._bound.done = True

    def register(self, address: int, nbytes: int) -> None:
        self.bind()
        err = self._lib.cudaHostRegister(address, nbytes, self.PORTABLE)
        self._check(err, f"cudaHostRegister of {nbytes} bytes")

    def unregister(self, address: int) -> None:
        self.bind()
        self._check(self._lib.cudaHostUnregister(address), "cudaHostUnregister")


__all__ = [
    "PAGE",
    "TOUCH_METHODS",
    "CudaError",
    "Cudart",
    "Mapping",
    "available_cpus",
    "huge_page_size",
    "loaded_library",
    "madvise",
    "map_exact",
    "page_round",
    "plan_chunks",
    "release",
    "resident_bytes",
    "thp_mode",
    "touch",
    "unmap",
    "worker_threads",
]
