"""glibc's own view of its mmap threshold, without torch (``test_glibc_malloc`` runs it in
this process and in a fresh interpreter): ``mallinfo2``'s count of mapped blocks."""

from __future__ import annotations

import ctypes

MIB = 1 << 20
_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks")
_FIELDS += ("uordblks", "fordblks", "keepcost")


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS]


def libc():
    """glibc with ``mallinfo2`` (2.33+); None where there is none."""
    lib = ctypes.CDLL("libc.so.6")
    if not hasattr(lib, "mallinfo2"):
        return None
    lib.mallinfo2.restype = Mallinfo2
    lib.malloc.restype = ctypes.c_void_p
    lib.malloc.argtypes = [ctypes.c_size_t]
    lib.free.argtypes = [ctypes.c_void_p]
    return lib


def threshold_moves(lib) -> bool:
    """Whether glibc's mmap threshold is dynamic: after a 30 MiB block's free (which raises
    a dynamic threshold to its size), a 29 MiB block comes from the heap; under a fixed
    128 KiB threshold it is a mapping of its own (no free heap chunk that large exists
    where every block over 128 KiB was a mapping)."""
    lib.free(lib.malloc(30 * MIB))
    mapped = lib.mallinfo2().hblks
    block = lib.malloc(29 * MIB)
    from_heap = lib.mallinfo2().hblks == mapped
    lib.free(block)
    return from_heap


if __name__ == "__main__":  # python -m tests.unit.glibc_probe [fixed]
    import sys

    from offloadprobe.engine.runtime import glibc_malloc

    glibc_malloc.enter(sys.argv[1])  # what the emulated device does first
    print(threshold_moves(libc()))
