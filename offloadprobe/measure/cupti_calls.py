"""Page-locked host memory by the calls that make it, from any thread: CUPTI's API
callbacks on ``cudaHostAlloc``, ``cudaHostRegister`` and their kin.

On the H200, CUPTI's ``MEMORY2`` records missed the ``cudaHostRegister`` calls the
``hugepin`` and ``relock`` strategies make on worker threads (ctypes, the portable flag):
4.5 MB recorded for 5 GiB page-locked. An API callback is different in kind: CUPTI calls
it synchronously on the calling thread, at the entry and the return of each call it is
enabled for, whatever thread makes it. Only the page-locking calls are enabled (the
runtime's ``cudaHostAlloc``, ``cudaMallocHost``, ``cudaHostRegister`` and their frees,
and the driver's ``cuMemHostAlloc``, ``cuMemAllocHost``, ``cuMemHostRegister`` and
theirs, which other libraries call directly), so no other call pays for it.

libcupti is reached through ctypes: the copy already loaded (cupti-python's) where there
is one, else the one installed beside torch's CUDA libraries, so nothing beyond torch is
needed. At a successful return the call's own arguments are read from CUPTI's
``CUpti_CallbackData`` and the ``*_params`` structs of NVIDIA's ``generated_cuda_meta.h``
and ``generated_cuda_runtime_api_meta.h`` (a pointer, or a pointer to the pointer made,
and a size) and a ``CALLS`` event goes to the memory log, stamped on CUPTI's clock with
the call's entry and return. A call the runtime passes on to the driver is seen twice,
at one address: the log counts each range once, and the ``MEMORY2`` record of the same
range once with it (``cupti_memory._pinned_union``).
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.measure.cupti_memory import CALLS, Allocation, MemoryLog

DRIVER, RUNTIME = 1, 2  # CUpti_CallbackDomain
ENTER, EXIT = 0, 1  # CUpti_ApiCallbackSite


@dataclass(frozen=True, slots=True)
class Call:
    """How one API call's parameters say what it page-locked or gave back."""

    name: str
    makes: bool
    """True: it page-locks ``size`` bytes; False: it releases the range at its pointer."""
    indirect: bool = False
    """The first parameter points to where the call writes the new pointer (``void **``)."""


CALLS_BY_ID: dict[tuple[int, int], Call] = {
    # (domain, cbid) from cupti_runtime_cbid.h and cupti_driver_cbid.h (append-only)
    (RUNTIME, 25): Call("cudaMallocHost", True, indirect=True),
    (RUNTIME, 26): Call("cudaFreeHost", False),
    (RUNTIME, 27): Call("cudaHostAlloc", True, indirect=True),
    (RUNTIME, 152): Call("cudaHostRegister", True),
    (RUNTIME, 153): Call("cudaHostUnregister", False),
    (DRIVER, 38): Call("cuMemFreeHost", False),
    (DRIVER, 39): Call("cuMemHostAlloc", True, indirect=True),
    (DRIVER, 294): Call("cuMemAllocHost_v2", True, indirect=True),
    (DRIVER, 301): Call("cuMemHostRegister", True),
    (DRIVER, 302): Call("cuMemHostUnregister", False),
    (DRIVER, 379): Call("cuMemHostRegister_v2", True),
}


class CallbackData(ctypes.Structure):
    """The leading fields of CUPTI's ``CUpti_CallbackData`` (cupti_callbacks.h)."""

    _fields_ = [
        ("callback_site", ctypes.c_int),
        ("function_name", ctypes.c_char_p),
        ("function_params", ctypes.c_void_p),
        ("function_return_value", ctypes.c_void_p),
    ]


class PointerSize(ctypes.Structure):
    """The leading fields every making call's params share: a pointer (or a pointer to
    it) and a ``size_t`` size (``cudaHostRegister_v4000_params``, ``cuMemHostAlloc_params``,
    ``cudaMallocHost_v3020_params``...)."""

    _fields_ = [("pointer", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Pointer(ctypes.Structure):
    """A releasing call's params: the pointer (``cudaFreeHost_v3020_params``...)."""

    _fields_ = [("pointer", ctypes.c_void_p)]


CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)


class PageLockingCalls:
    """The callbacks, feeding ``log``: :meth:`handle` is what CUPTI calls."""

    def __init__(self, log: MemoryLog, clock: Any) -> None:
        self.log, self.clock = log, clock
        self.calls = 0
        """Successful page-locking and releasing calls seen (a runtime call and the driver
        call it makes count twice)."""
        self.problem: str | None = None
        """Why the route stopped (a callback that failed); None while it records."""
        self._entered = threading.local()

    def now(self) -> int:
        return int(self.clock())

    def handle(self, userdata: Any, domain: int, cbid: int, cbdata: int | None) -> None:
        """One callback, on the thread that made the call. Never raises (CUPTI has nowhere
        to put an exception): a failure stops the route and says why."""
        if self.problem is not None or not cbdata:
            return
        try:
            self._handle(CALLS_BY_ID.get((int(domain), int(cbid))), cbdata)
        except Exception as err:
            self.problem = f"page-locking callback failed: {err!r}"

    def _handle(self, call: Call | None, cbdata: int) -> None:
        if call is None:
            return
        data = CallbackData.from_address(cbdata)
        stack = self._entered.__dict__.setdefault("stack", [])
        if data.callback_site == ENTER:
            stack.append(self.now())
            return
        began = stack.pop() if stack else None
        if data.callback_site != EXIT or not data.function_return_value or not data.function_params:
            return
        if ctypes.c_int.from_address(data.function_return_value).value != 0:
            return  # the call failed: nothing was page-locked or released
        if call.makes:
            params = PointerSize.from_address(data.function_params)
            address = params.pointer
            if call.indirect:
                address = ctypes.c_void_p.from_address(address).value if address else None
            event = Allocation(self.now(), CALLS, int(address or 0), int(params.size), began)
        else:
            address = Pointer.from_address(data.function_params).pointer
            event = Allocation(self.now(), CALLS, int(address or 0), -1)
        if event.address:
            self.calls += 1
            self.log.add([event])


def find_libcupti(maps: str | None = None) -> str | None:
    """The libcupti to use: one already loaded here (``/proc/self/maps``), else one
    installed beside torch's CUDA libraries (the ``nvidia`` wheels' ``lib`` folders) or
    the toolkit's, the CUDA major version torch was built with first."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            maps = ""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5].strip()).name.startswith("libcupti.so"):
            return fields[5].strip()
    version = getattr(getattr(sys.modules.get("torch"), "version", None), "cuda", None)
    major = str(version).split(".")[0] if version else ""
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    roots = [os.path.join(p, "nvidia") for p in sys.path if p]
    roots += [os.path.join(home, "extras", "CUPTI"), os.path.join(home, "lib64")]
    found = sorted(
        {f for r in roots for f in glob.glob(os.path.join(r, "**", "libcupti.so*"), recursive=True)}
    )
    found.sort(key=lambda f: not (major and f.endswith(f".so.{major}")))
    return found[0] if found else None


_KEEP: list[Any] = []
"""The ctypes callback and library: alive for the process (CUPTI calls them to the end)."""


def start(log: MemoryLog, path: str | None = None) -> tuple[PageLockingCalls | None, str | None]:
    """Subscribe to the page-locking calls; ``(route, None)``, or ``(None, why not)``."""
    path = path or find_libcupti()
    if path is None:
        return None, "no libcupti found for CUPTI's API callbacks"
    try:
        lib = ctypes.CDLL(path)
        lib.cuptiGetTimestamp.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p]
        lib.cuptiEnableCallback.argtypes = [
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_uint32,
        ]
        lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError) as err:
        return None, f"libcupti unusable for API callbacks ({err})"
    stamp = ctypes.c_uint64()
    stamp_lock = threading.Lock()

    def clock() -> int:
        with stamp_lock:
            lib.cuptiGetTimestamp(ctypes.byref(stamp))
            return stamp.value

    route = PageLockingCalls(log, clock)
    callback = CALLBACK(route.handle)
    subscriber = ctypes.c_void_p()
    err = lib.cuptiSubscribe(ctypes.byref(subscriber), callback, None)
    if err:
        return None, f"CUPTI refused API callbacks ({_result(lib, err)})"
    _KEEP.extend([lib, callback, route])
    for domain, cbid in CALLS_BY_ID:
        if lib.cuptiEnableCallback(1, subscriber, domain, cbid):
            lib.cuptiUnsubscribe(subscriber)
            return None, f"CUPTI refused the callback on {CALLS_BY_ID[domain, cbid].name}"
    # before the interpreter finalises: a page-locking call C++ makes at exit (a static
    # allocator's destructor) must not call back into a Python that is gone
    atexit.register(lib.cuptiUnsubscribe, subscriber)
    return route, None


def _result(lib: Any, err: int) -> str:
    """CUPTI's name for a result code (``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``
    where a profiler subscribed first)."""
    text = ctypes.c_char_p()
    try:
        if lib.cuptiGetResultString(err, ctypes.byref(text)) == 0 and text.value:
            return f"{text.value.decode(errors='replace')}, CUptiResult {err}"
    except AttributeError:
        pass
    return f"CUptiResult {err}"
