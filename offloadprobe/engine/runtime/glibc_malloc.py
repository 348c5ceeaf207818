"""What CPU emulation does to the process's glibc malloc (``--emulation-malloc``).

``real`` (the default) leaves glibc as the process has it: its dynamic mmap threshold
starts at 128 KiB and rises, at the first free of a larger mapped block, to that block's
size (up to 32 MiB); later blocks under it come from the heap, and their frees leave the
pages resident. On the H200 a pageable per-tensor offload held 0.01x, 0.63x, 0.82x of its
bytes after the loads of three cycles for that reason; a fixed threshold read 0.00x.

What the emulation still changes under ``real``, all said in every run's notes:

- device storages are glibc allocations too: their frees move the threshold as a GPU's
  device frees would not, and their heap blocks lie among the host copies' (a device
  allocation that gets a free host block's resident pages keeps them as host pages where
  it can tell, ``device_memory.Recycling``);
- the free heap is given back to the kernel (``malloc_trim``) after every train step, the
  model build and the tool's own fingerprints (before an offload, after a load): their
  activations and temporaries are host memory here and device memory on a GPU. Left
  resident in the free lists they would serve the next host copies without a page fault,
  hiding them from every host figure (a 48 MiB per-tensor offload read 0.23x for 1.00x),
  or stay resident and count as the strategy's (a 16 MiB ``lazy`` read 1.5x for 1.0x).
  A strategy's own retention shows in the phase that made it (and in the held figure
  after each load); the trim after a load's check gives it back before the next train;
- and so it is when the emulated device starts (what earlier work in the process left:
  another test, a zygote) and after the reference run's model is dropped
  (``Runtime.release``).

``fixed`` fixes the threshold at 128 KiB (``mallopt``, for the rest of the process: glibc
has no way back), so every host copy of that size is a mapping of its own, returned at
its free; host figures then never show what glibc's heap keeps.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

from offloadprobe.engine.runtime.host_pages import _libc

P = ParamSpec("P")
R = TypeVar("R")
MODES = ("real", "fixed")
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024

NOTES = {
    "real": (
        "CPU emulation keeps glibc's own malloc; it trims the free heap where a GPU's memory "
        "would be the device's (build, train steps, checks; --emulation-malloc fixed: a "
        "128 KiB mmap threshold)"
    ),
    "fixed": (
        "CPU emulation fixes glibc's mmap threshold at 128 KiB (--emulation-malloc fixed): "
        "every host copy of that size is a mapping of its own and leaves RSS at its free, "
        "which glibc's dynamic threshold on a GPU host does not promise"
    ),
}
"""The line each mode puts in a run's notes."""

_MODE: str | None = None
"""The active emulated device's mode; None while none is active."""
_FIXED_HERE = [False]
"""Whether this process fixed the threshold itself (glibc has no way back)."""
FIXING_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
"""glibc's environment variables any of which turns the dynamic threshold off."""
FIXING_TUNABLES = ("mmap_threshold", "trim_threshold", "top_pad", "mmap_max")


def fix_malloc_threshold() -> bool:
    """Pin glibc's mmap threshold so large host allocations are mappings of their own."""
    _FIXED_HERE[0] = True
    try:
        return bool(_libc().mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def fixed_before(environ: Mapping[str, str] | None = None) -> str | None:
    """Why glibc's threshold was fixed before the emulation could keep it (the process's
    environment at its start, or this process earlier); None where it was not."""
    env = os.environ if environ is None else environ
    for name in FIXING_VARIABLES:
        if name in env:
            return f"{name} in the environment"
    tunables = env.get("GLIBC_TUNABLES", "")
    for name in FIXING_TUNABLES:
        if f"glibc.malloc.{name}" in tunables:
            return f"glibc.malloc.{name} in GLIBC_TUNABLES"
    return "--emulation-malloc fixed earlier in this process" if _FIXED_HERE[0] else None


def note(mode: str, environ: Mapping[str, str] | None = None) -> str:
    """The line ``mode`` puts in a run's notes, saying where glibc's own behaviour could
    not be kept."""
    why = fixed_before(environ) if mode == "real" else None
    if why is None:
        return NOTES[mode]
    return (
        f"CPU emulation: glibc's mmap threshold was fixed before this run ({why}): host "
        "figures are a fixed 128 KiB threshold's, not glibc's own dynamic one's"
    )


def trim_host_heap() -> None:
    """Return free glibc heap pages to the kernel (``malloc_trim(0)``), where glibc exists."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().malloc_trim(0)


def enter(mode: str) -> None:
    """An emulated device starts under ``mode``."""
    global _MODE
    if mode not in MODES:
        raise ValueError(f"--emulation-malloc must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "fixed":
        fix_malloc_threshold()
    elif fixed_before() is not None:
        mode = "fixed"  # glibc behaves as fixed: nothing of its own to keep, no trimming
    else:  # what earlier work in this process left in the free lists (a test, a zygote)
        trim_host_heap()
    _MODE = mode


def leave() -> None:
    global _MODE
    _MODE = None


def device_work_done() -> None:
    """After work that is device work on a GPU (a train step, the model build, the tool's
    own fingerprints) under ``real``: its free heap goes back to the kernel (see the
    module's notes). Nothing under ``fixed`` or on a GPU."""
    if _MODE == "real":
        trim_host_heap()


def device_work(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` is device work on a GPU: :func:`device_work_done` after each call."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            device_work_done()

    return wrapper
