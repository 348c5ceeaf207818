"""One measured call, in the process that makes it. Stdlib only (and the torch-free
``core.pinned_stats``); torch is read, never imported.

Host: the call's exact peak over its start. At entry the kernel's high-water mark is
reset (``5`` into ``/proc/self/clear_refs`` sets VmHWM to the current RSS); at exit VmHWM
is the highest RSS since, even of memory freed microseconds later. Where the kernel
refuses the reset, one thread polls VmRSS every millisecond while a call is open, and the
record says ``"host_peak_method": "sampled"`` (it can miss short peaks). That is the
RSS view (``rss_peak_bytes``). The cgroup view is the parent's: at entry, just before the
RSS reset, and at exit, just after the RSS read, the probe tells the parent (``meter``,
a ``MeterClient``) and waits while the parent reads the process's own memory cgroup;
those figures never pass through this process (``attach/meter.py``).

GPU (only where torch is imported and CUDA initialised in this process; never
initialised here): PyTorch's allocated and reserved bytes before and after, the
allocated and reserved peaks over the call (torch's peak counters are reset at entry
unless the job file says ``reset_gpu_peak: false``), and the driver's used bytes
(``mem_get_info``: total less free) before and after, on the current device.

Pinned: PyTorch's caching host allocator's reserved and in-use bytes (``torch.cuda.
host_memory_stats``), through :data:`PINNED`, the seam where a by-fact source (CUPTI)
replaces it: any object with ``figures() -> dict | None``.

Nested calls (a wrapped function that calls another, in any thread): each call is
measured over its own window and exactly. Before a reset at an inner call's entry, the
high-water marks read so far are folded into every open call, so an outer call's peak
is the highest of its whole window, the inner call's included. Each record says its
``depth`` (open calls around it in this process) and ``parent`` (the innermost one).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

from offloadprobe.core import pinned_stats

STATUS = "/proc/self/status"
STATM = "/proc/self/statm"
PAGE = os.sysconf("SC_PAGE_SIZE")
CLEAR_REFS = "/proc/self/clear_refs"
SAMPLE_INTERVAL_S = 0.001


def _field(status: bytes, key: bytes) -> int:
    at = status.find(key)
    if at < 0:
        return 0
    end = status.find(b"\n", at)
    return int(status[at + len(key) : end].split()[0]) * 1024


class _ProcFiles:
    """``/proc/self/status`` and ``clear_refs`` kept open (this process's: reopened after
    a fork, whose child would otherwise read its parent's)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.status = os.open(STATUS, os.O_RDONLY)
        self.statm = os.open(STATM, os.O_RDONLY)
        try:
            self.clear = os.open(CLEAR_REFS, os.O_WRONLY)
        except OSError:
            self.clear = -1


_FILES: _ProcFiles | None = None


def _files() -> _ProcFiles:
    global _FILES
    if _FILES is None or _FILES.pid != os.getpid():
        _FILES = _ProcFiles()
    return _FILES


def read_rss_hwm() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, bytes."""
    status = os.pread(_files().status, 8192, 0)
    rss = _field(status, b"VmRSS:")
    return rss, max(_field(status, b"VmHWM:"), rss)


def read_rss() -> int:
    """VmRSS alone, from ``statm`` (the kernel makes it far faster than ``status``)."""
    return int(os.pread(_files().statm, 256, 0).split()[1]) * PAGE


def reset_hwm() -> bool:
    """VmHWM back to the current RSS; False where the kernel refuses."""
    fd = _files().clear
    if fd < 0:
        return False
    try:
        os.write(fd, b"5")
    except OSError:
        return False
    return True


def _cuda() -> Any:
    """torch.cuda where torch is imported and CUDA initialised here; else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def ranks() -> dict[str, int | None]:
    """Rank, local rank and node rank from the launcher's variables (torchrun's, and the
    ones verl's workers set under Ray), else torch.distributed's rank where initialised."""
    env = os.environ

    def number(*names: str) -> int | None:
        for name in names:
            value = env.get(name)
            if value is not None and value.strip().lstrip("-").isdigit():
                return int(value)
        return None

    rank = number("RANK")
    if rank is None:
        rank = number("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
    if rank is None:
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_initialized():
                rank = int(dist.get_rank())
        except Exception:
            rank = None
    return {
        "rank": rank,
        "local_rank": number("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
        "node_rank": number("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"),
    }


class TorchHostStats:
    """Pinned bytes as PyTorch's caching host allocator counts them (what it owns and
    what is in use). Blind to page-locked memory made outside it (cudaHostRegister of
    other memory, CuPy): the by-fact source replaces this one."""

    source = "torch.cuda.host_memory_stats"

    def figures(self) -> dict[str, Any] | None:
        cuda = _cuda()
        stats_fn = getattr(cuda, "host_memory_stats", None) if cuda is not None else None
        if stats_fn is None:
            return None
        # both key schemas; in use None on a torch whose counters miss frees (up to 2.11
        # its active_bytes only climb while blocks go back to the cache)
        version = getattr(sys.modules.get("torch"), "__version__", None)
        figures = pinned_stats.read(stats_fn(), version)
        return {"reserved": figures.reserved, "in_use": figures.in_use, "source": self.source}


PINNED: Any = TorchHostStats()
"""Where pinned bytes come from: replace with an object that has ``figures()``."""


class _Sampler(threading.Thread):
    """Fallback where VmHWM cannot be reset: polls VmRSS while any call is open."""

    def __init__(self, probe: CallProbe) -> None:
        super().__init__(name="offloadprobe-rss-sampler", daemon=True)
        self.probe = probe

    def run(self) -> None:
        while True:
            with self.probe.lock:
                frames = list(self.probe.open)
            if not frames:
                self.probe.wake.wait()
                self.probe.wake.clear()
                continue
            rss, _ = read_rss_hwm()
            for frame in frames:
                frame["_peak"] = max(frame["_peak"], rss)
            time.sleep(SAMPLE_INTERVAL_S)


class CallProbe:
    """The calls open in this process and their measurement."""

    def __init__(self, *, meter: Any = None, reset_gpu_peak: bool) -> None:
        self.meter = meter
        self.reset_gpu_peak = reset_gpu_peak
        self.lock = threading.Lock()
        self.open: list[dict[str, Any]] = []
        self.wake = threading.Event()
        self.exact: bool | None = None
        self._sampler: _Sampler | None = None
        self.host = socket.gethostname()
        self._ranks: dict[str, int | None] | None = None

    def ranks(self) -> dict[str, int | None]:
        """The process's ranks, looked up again until a rank is known (verl's workers
        set them after they start), then kept."""
        if self._ranks is not None:
            return self._ranks
        found = ranks()
        if found["rank"] is not None:
            self._ranks = found
        return found

    def after_fork(self) -> None:
        """In a forked child: calls open in the parent are not this process's."""
        self.lock = threading.Lock()
        self.open = []
        self.wake = threading.Event()
        self._sampler = None
        self._ranks = None

    def _fold_peaks(self) -> None:
        """Fold the high-water marks so far into every open call (before a reset)."""
        if not self.open:
            return
        _, hwm = read_rss_hwm()
        cuda = _cuda()
        gpu = (cuda.max_memory_allocated(), cuda.max_memory_reserved()) if cuda else None
        for frame in self.open:
            frame["_peak"] = max(frame["_peak"], hwm)
            if gpu is not None and frame["_gpu"] is not None:
                frame["_gpu_peaks"] = (
                    max(frame["_gpu_peaks"][0], gpu[0]),
                    max(frame["_gpu_peaks"][1], gpu[1]),
                )

    def enter(self, phase: str, target: str, index: int) -> dict[str, Any]:
        """Open a call: fold, reset, read the starting figures (host last, just before
        the call runs)."""
        with self.lock:
            self._fold_peaks()
            parent = self.open[-1] if self.open else None
            frame: dict[str, Any] = {
                "phase": phase,
                "target": target,
                "index": index,
                "depth": len(self.open),
                "parent": None if parent is None else [parent["phase"], parent["index"]],
                "pid": os.getpid(),
                **self.ranks(),
                "host": self.host,
                "thread": threading.current_thread().name,
            }
            cuda = _cuda()
            frame["_gpu"] = None
            if cuda is not None:
                try:
                    if self.reset_gpu_peak:
                        cuda.reset_peak_memory_stats()
                    free, total = cuda.mem_get_info()
                    frame["_gpu"] = {
                        "gpu_device": cuda.current_device(),
                        "gpu_allocated_before_bytes": cuda.memory_allocated(),
                        "gpu_reserved_before_bytes": cuda.memory_reserved(),
                        "gpu_driver_used_before_bytes": total - free,
                        "_peak_at_entry": cuda.max_memory_allocated(),
                    }
                    frame["_gpu_peaks"] = (cuda.max_memory_allocated(), cuda.max_memory_reserved())
                except Exception:
                    frame["_gpu"] = None
            frame["_pinned"] = _pinned()
            if self.meter is not None:  # the parent reads the cgroup while this waits
                self.meter.enter(phase, index)
            if self.exact is None:
                self.exact = reset_hwm()
            elif self.exact:
                reset_hwm()
            if self.exact:
                rss = hwm = read_rss()  # just reset: the high-water mark is the RSS now
            else:
                rss, hwm = read_rss_hwm()
            frame["host_before_bytes"] = rss
            frame["_peak"] = hwm
            self.open.append(frame)
            if not self.exact:
                self._start_sampler()
            frame["start_time"] = time.time()
            frame["_t0"] = time.perf_counter()
            return frame

    def _start_sampler(self) -> None:
        if self._sampler is None:
            self._sampler = _Sampler(self)
            self._sampler.start()
        self.wake.set()

    def exit(self, frame: dict[str, Any], error: BaseException | None) -> dict[str, Any]:
        """Close a call; return its record (host first, before anything else allocates)."""
        seconds = time.perf_counter() - frame["_t0"]
        rss, hwm = read_rss_hwm()
        if self.meter is not None:
            self.meter.exit(frame["phase"], frame["index"])
        with self.lock:
            self.open[:] = [f for f in self.open if f is not frame]
            peak = max(frame.pop("_peak"), hwm, rss)
        frame.pop("_t0")
        record = {k: v for k, v in frame.items() if not k.startswith("_")}
        record.update(
            seconds=seconds,
            raised=error is not None,
            error=None if error is None else type(error).__qualname__,
            host_after_bytes=rss,
            rss_peak_bytes=peak - frame["host_before_bytes"],
            host_peak_rss_bytes=peak,
            host_peak_method="vmhwm" if self.exact else "sampled",
        )
        record.update(_gpu_after(frame, self.reset_gpu_peak))
        record.update(_pinned_fields(frame.get("_pinned"), _pinned()))
        return record


def _pinned() -> dict[str, Any] | None:
    try:
        return PINNED.figures()
    except Exception:
        return None


def _pinned_fields(before: dict | None, after: dict | None) -> dict[str, Any]:
    return {
        "pinned_source": (after or before or {}).get("source"),
        "pinned_before_bytes": None if before is None else before["reserved"],
        "pinned_after_bytes": None if after is None else after["reserved"],
        "pinned_in_use_after_bytes": None if after is None else after["in_use"],
    }


GPU_KEYS = (
    "gpu_device",
    "gpu_allocated_before_bytes",
    "gpu_allocated_after_bytes",
    "gpu_reserved_before_bytes",
    "gpu_reserved_after_bytes",
    "gpu_allocated_peak_bytes",
    "gpu_reserved_peak_bytes",
    "gpu_driver_used_before_bytes",
    "gpu_driver_used_after_bytes",
)


def _gpu_after(frame: dict[str, Any], reset: bool) -> dict[str, Any]:
    """The GPU fields of a call; None where CUDA was not initialised at its entry."""
    out: dict[str, Any] = dict.fromkeys(GPU_KEYS)
    before = frame.get("_gpu")
    cuda = _cuda()
    if before is None or cuda is None:
        return out
    try:
        free, total = cuda.mem_get_info()
        alloc_peak = max(frame["_gpu_peaks"][0], cuda.max_memory_allocated())
        reserved_peak = max(frame["_gpu_peaks"][1], cuda.max_memory_reserved())
        if not reset and alloc_peak <= before["_peak_at_entry"]:
            alloc_peak = reserved_peak = None  # below the job's earlier peak: not known
        out.update({k: v for k, v in before.items() if not k.startswith("_")})
        out.update(
            gpu_allocated_after_bytes=cuda.memory_allocated(),
            gpu_reserved_after_bytes=cuda.memory_reserved(),
            gpu_allocated_peak_bytes=alloc_peak,
            gpu_reserved_peak_bytes=reserved_peak,
            gpu_driver_used_after_bytes=total - free,
        )
    except Exception:
        return dict.fromkeys(GPU_KEYS)
    return out
