"""``hugepin``: exact host mappings page-locked at the ceiling, chunk by chunk, while the
earlier chunks already copy; kept and reused every cycle.

Where the first offload's time goes (H200, 5 GiB, ``/work/shared/reference``): allocating
pinned memory with ``pin_memory=True`` runs at 1.9 GB/s, the copy into page-locked memory
at 55 GB/s. The page-locking itself is fast when it is split into the kernel's and the
driver's parts and those overlap:

1. each DDP buffer gets one private anonymous mapping of exactly its bytes (whole 4 KiB
   pages; its whole 2 MiB huge pages advised ``MADV_HUGEPAGE``, the tail not), reused on
   every later cycle. Where the kernel refuses the advice the mapping keeps 4 KiB pages
   and the strategy's ``notes`` say so. Each parameter outside the DDP buffers (frozen
   ones, a reference model's: ``engine/model/sources.py``) is one more source of the same
   pipeline, with its own exact mapping;
2. the mapping is cut into chunks (``CHUNK_MIB``, 64 MiB; the first source's ramp up from
   ``FIRST_CHUNK_MIB``, 4 MiB, so the first copy starts early); a pool of threads sized
   to the CPUs this process may use (its affinity mask over the ranks on the node, less
   two for the node, the thread issuing copies and the registering one) first-touches
   them (``memset``; ``MADV_POPULATE_WRITE`` on request);
3. one thread (``registrars`` threads, each taking the next chunk) registers each touched
   chunk with ``cudaHostRegister`` (through ctypes, so the GIL is released while the
   driver pins);
4. the main thread issues each registered chunk's device-to-host copy on a side stream as
   soon as it is registered, one copy per registered range (a copy across two separately
   registered ranges fails with "invalid argument").

Loads copy chunk by chunk from the registered memory at link speed. Host memory: every
source's bytes, once (no power-of-two rounding; each mapping rounded to whole 4 KiB pages,
which a small loose parameter feels most). ``registered_bytes`` counts exactly the bytes
passed to successful ``cudaHostRegister`` calls and held when the last offload returned.
The ``relock`` strategy is the same machinery with every page handed back after each load.

At construction (before the first phase) the strategy warms the path once on one huge
page: a side stream, the threads, one register/copy/unregister. Those are per-process
constants, not payload-sized; ``warmup_seconds`` records them.

In CPU emulation the same pipeline runs without CUDA: chunks are touched on the threads,
nothing is page-locked (``registered_bytes`` stays 0), and copies are host copies.

Settings (``engine/hugepin_settings.py``; ``--strategy-option key=value``, for sweeps):
``threads``, ``registrars``, ``touch_first`` (``1``: every chunk touched before the first
registration), ``chunk_mib``, ``first_chunk_mib`` (the first source's chunks ramp up from
it; ``0``: no ramp), ``huge_pages`` (``0`` for 4 KiB pages), ``touch`` (memset, populate,
auto), ``stages`` (a path: every offload's and load's stage timings are
written there as JSON at ``close()``) and ``register_core`` (``1``: each registering
thread bound to a core of its own, the touch threads to the other cores).

The descriptors (``engine/strategies/hugepin.py``, ``relock.py``) name this module and
load it only when the strategy is built: it imports torch.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from offloadprobe.core.errors import OffloadProbeError
from offloadprobe.engine import hostmem
from offloadprobe.engine.hugepin_settings import (
    CHUNK_MIB,
    FIRST_CHUNK_MIB,
    OPTIONS,
    Settings,
    place_threads,
)
from offloadprobe.engine.model.sources import Source, to_load_sources, to_offload_sources
from offloadprobe.engine.runtime import Runtime

__all__ = [  # Settings and its constants live in hugepin_settings (torch-free)
    "CHUNK_MIB",
    "FIRST_CHUNK_MIB",
    "OPTIONS",
    "HugePinStrategy",
    "Settings",
    "Stages",
    "Step",
    "hugepin",
    "plan",
    "relock",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One unit of the pipeline: one registered range of one host copy, one copy."""

    copy: int
    """Index of the host copy (the source: a DDP buffer or a loose parameter)."""
    chunk: int
    offset: int
    nbytes: int
    lock: bool
    """Touch and register the range before its copy (it is not page-locked yet)."""


def plan(
    chunks: Sequence[Sequence[tuple[int, int]]], locked: Sequence[Sequence[bool]]
) -> list[Step]:
    """The pipeline's steps, source by source and chunk by chunk in address order: each
    chunk is exactly one registered range and gets exactly one copy."""
    return [
        Step(copy=c, chunk=i, offset=o, nbytes=n, lock=not locked[c][i])
        for c, ranges in enumerate(chunks)
        for i, (o, n) in enumerate(ranges)
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class Stages:
    """Where one offload's or load's time went (the strategy's own clock)."""

    phase: str
    seconds: float
    moved_bytes: int
    locked_bytes: int
    """Bytes touched and registered in this phase (offload) or unregistered and handed
    back (load)."""
    chunks: int
    threads: int
    touch_seconds: float
    """Seconds the threads spent touching, summed over chunks."""
    register_seconds: float
    """Seconds in ``cudaHostRegister`` (offload) or ``cudaHostUnregister`` + release (load)."""
    first_copy_seconds: float | None
    """From the phase's start to its first copy issued."""
    touch_method: str | None


@dataclass(slots=True)
class HostCopy:
    """One source's host memory (a DDP buffer's or a loose parameter's): its mapping, a
    byte view of it, its chunks."""

    mapping: hostmem.Mapping
    host: torch.Tensor | None
    chunks: tuple[tuple[int, int], ...]
    locked: list[bool] = field(default_factory=list)


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(-1).view(torch.uint8)


class HugePinStrategy:
    """Exact huge-page host mappings, page-locked in a chunk pipeline during the copy.

    ``ephemeral``: every load ends by unregistering each chunk and handing its pages back
    (``MADV_DONTNEED``), so nothing is held while training, and every offload locks again.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        ephemeral: bool = False,
        settings: Settings | None = None,
        cudart: Any = None,
    ) -> None:
        self.runtime, self.ephemeral = runtime, ephemeral
        self.settings = settings or Settings.from_options(
            getattr(runtime, "strategy_options", None)
        )
        self.registered_bytes = 0
        """Bytes page-locked by this strategy when its last offload returned (exact)."""
        self.locked_bytes = 0
        """Bytes page-locked by this strategy now."""
        self.notes: list[str] = []
        """What the run should say about this strategy's memory (a refused huge-page advice,
        a touch fallback)."""
        self.stages: list[Stages] = []
        self.copies: dict[int, HostCopy] = {}
        self.warmup_seconds = 0.0
        self._touch = self.settings.touch
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.settings.threads, thread_name_prefix="hugepin-touch")
        self._serial = ThreadPoolExecutor(
            self.settings.registrars, thread_name_prefix="hugepin-register"
        )
        self._cudart = cudart
        self._stream: Any = None
        self._on_cuda = runtime.can_pin
        if self._on_cuda:
            device = torch.cuda.current_device()
            self._cudart = cudart or hostmem.Cudart.loaded(device) or _TorchCudart(device)
            if isinstance(self._cudart, _TorchCudart):
                self._note(
                    "libcudart is not a loaded shared object: cudaHostRegister holds the GIL"
                )
            self._stream = torch.cuda.Stream()
        self._warm_up()

    # ------------------------------------------------------------------ bookkeeping

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _warm_up(self) -> None:
        """One huge page through the whole path, and every thread started."""
        start = time.perf_counter()
        barrier = threading.Barrier(self.settings.threads)
        wait([self._pool.submit(barrier.wait) for _ in range(self.settings.threads)])
        if self.settings.register_core:
            self._note(place_threads(self._pool, self._serial, self.settings))
        size = hostmem.huge_page_size()
        mapping = hostmem.map_exact(size, huge=self.settings.huge_pages)
        try:
            self._touch_range(mapping.address, size)
            if self._on_cuda:
                self._serial.submit(self._cudart.register, mapping.address, size).result()
                device = torch.empty(size, dtype=torch.uint8, device="cuda")
                host = _frombuffer(mapping.address, size)
                with torch.cuda.stream(self._stream):
                    host.copy_(device, non_blocking=True)
                self._stream.synchronize()
                del device, host
                self._serial.submit(self._cudart.unregister, mapping.address).result()
        finally:
            hostmem.unmap(mapping)
        self.warmup_seconds = time.perf_counter() - start

    def _touch_range(self, address: int, length: int) -> float:
        start = time.perf_counter()
        used = hostmem.touch(address, length, self._touch)
        if used != self._touch:  # "auto" resolved, once for all later chunks
            with self._lock:
                if used == "memset":
                    self._note(
                        "hugepin: first touch by memset, the kernel lacks MADV_POPULATE_WRITE"
                    )
                self._touch = used
        return time.perf_counter() - start

    def _host_copy(self, source: Source) -> HostCopy:
        key, size = source.key, source.nbytes
        found = self.copies.get(key)
        if found is not None:
            if found.mapping.nbytes != size:
                raise OffloadProbeError(
                    f"host copy of {found.mapping.nbytes} bytes no longer matches its "
                    f"{source.kind} of {size} bytes: the model was rebuilt"
                )
            return found
        mapping = hostmem.map_exact(size, huge=self.settings.huge_pages)
        if mapping.refused is not None:
            self._note(f"hugepin: 4 KiB pages, {mapping.refused}")
        first = None if self.copies else self.settings.first_chunk_bytes  # the first source
        chunks = hostmem.plan_chunks(size, self.settings.chunk_bytes, first)
        copy = HostCopy(
            mapping=mapping,
            host=_frombuffer(mapping.address, size),
            chunks=chunks,
            locked=[False] * len(chunks),
        )
        self.copies[key] = copy
        return copy

    # ------------------------------------------------------------------ stages

    def _lock_chunk(
        self, copy: HostCopy, step: Step, touched: Future[float]
    ) -> tuple[float, float]:
        """On the registering thread: wait for the chunk's touch, then page-lock it."""
        touch_seconds = touched.result()
        start = time.perf_counter()
        if self._cudart is not None:
            self._cudart.register(copy.mapping.address + step.offset, step.nbytes)
            with self._lock:
                self.locked_bytes += step.nbytes
        copy.locked[step.chunk] = True
        return touch_seconds, time.perf_counter() - start

    def _unlock_chunk(self, copy: HostCopy, offset: int, size: int, index: int, done: Any) -> float:
        """After the chunk's load copy completed: unregister it and hand its pages back."""
        if done is not None:
            done.synchronize()
        start = time.perf_counter()
        if copy.locked[index] and self._cudart is not None:
            self._cudart.unregister(copy.mapping.address + offset)
            with self._lock:
                self.locked_bytes -= size
        copy.locked[index] = False
        hostmem.release(copy.mapping.address + offset, hostmem.page_round(size))
        return time.perf_counter() - start

    def _copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """One copy of one registered range (asynchronous on CUDA)."""
        dst.copy_(src, non_blocking=self._on_cuda)

    # ------------------------------------------------------------------ protocol

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        start = time.perf_counter()
        moving = to_offload_sources(models)  # DDP buffers, then parameters outside them
        if not moving:  # all offloaded already: a no-op
            return
        copies = [self._host_copy(m) for m in moving]
        steps = plan([c.chunks for c in copies], [c.locked for c in copies])
        sources = [_bytes_of(m.data) for m in moving]
        touched: dict[Step, Future[float]] = {}
        locked: dict[Step, Future[tuple[float, float]]] = {}
        for s in steps:
            if s.lock:
                length = hostmem.page_round(s.nbytes)
                address = copies[s.copy].mapping.address + s.offset
                touched[s] = self._pool.submit(self._touch_range, address, length)
        if self.settings.touch_first:  # no page fault while the driver pins
            wait(touched.values())
        for s in steps:
            if s.lock:
                locked[s] = self._serial.submit(self._lock_chunk, copies[s.copy], s, touched[s])
        first_copy = None
        stream = self._stream
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for s in steps:
                    if s.lock:
                        locked[s].result()
                    host = copies[s.copy].host
                    assert host is not None
                    end = s.offset + s.nbytes
                    self._copy(host[s.offset : end], sources[s.copy][s.offset : end])
                    if first_copy is None:
                        first_copy = time.perf_counter() - start
        finally:
            wait([*touched.values(), *locked.values()])  # nothing left running on a failure
            if stream is not None:
                stream.synchronize()
        self.runtime.synchronize()  # every copy landed before any device storage is freed
        for m in moving:
            m.free()
        self.registered_bytes = self.locked_bytes
        timings = [f.result() for f in locked.values()]
        self.stages.append(
            Stages(
                phase="offload",
                seconds=time.perf_counter() - start,
                moved_bytes=sum(s.nbytes for s in steps),
                locked_bytes=sum(s.nbytes for s in steps if s.lock),
                chunks=len(steps),
                threads=self.settings.threads,
                touch_seconds=sum(t for t, _ in timings),
                register_seconds=sum(r for _, r in timings),
                first_copy_seconds=first_copy,
                touch_method=self._touch if locked else None,
            )
        )

    def load(self, models: list[Any]) -> None:
        start = time.perf_counter()
        releases: list[Future[float]] = []
        later: list[tuple[Any, ...]] = []
        moved = handed_back = 0
        for source in to_load_sources(models):
            copy = self.copies[source.key]
            source.restore()
            target = _bytes_of(source.data)
            assert copy.host is not None
            for index, (offset, size) in enumerate(copy.chunks):
                self._copy(target[offset : offset + size], copy.host[offset : offset + size])
                moved += size
                if not self.ephemeral:
                    continue
                handed_back += size
                if not self._on_cuda:
                    later.append((copy, offset, size, index, None))
                    continue
                done = torch.cuda.Event()
                done.record()  # the chunk goes back once its copy has completed
                releases.append(
                    self._serial.submit(self._unlock_chunk, copy, offset, size, index, done)
                )
            source.restore_grads()
        # CPU emulation accounts each device allocation by the RSS change around it: pages
        # go back only once every allocation of the phase is made (on CUDA, as copies land)
        releases += [self._pool.submit(self._unlock_chunk, *args) for args in later]
        wait(releases)
        release_seconds = sum(f.result() for f in releases)
        self.runtime.synchronize()
        self.stages.append(
            Stages(
                phase="load",
                seconds=time.perf_counter() - start,
                moved_bytes=moved,
                locked_bytes=handed_back,
                chunks=sum(len(c.chunks) for c in self.copies.values()),
                threads=self.settings.threads,
                touch_seconds=0.0,
                register_seconds=release_seconds,
                first_copy_seconds=None,
                touch_method=None,
            )
        )

    def close(self) -> None:
        """Unregister every locked chunk, unmap every mapping, stop the threads."""
        self.runtime.synchronize()
        # first what the threads still run (a load that failed part-way leaves chunks
        # going back): none may unregister, or madvise, a range unmapped under it
        self._pool.shutdown()
        self._serial.shutdown()
        try:
            for copy in self.copies.values():
                for index, (offset, size) in enumerate(copy.chunks):
                    if copy.locked[index] and self._cudart is not None:
                        self._cudart.unregister(copy.mapping.address + offset)
                        self.locked_bytes -= size
                    copy.locked[index] = False
                copy.host = None
                hostmem.unmap(copy.mapping)
            self.copies.clear()
            self.registered_bytes = 0
        finally:
            path = self.settings.stages
            if path:
                doc = {
                    "settings": asdict(self.settings),
                    "ephemeral": self.ephemeral,
                    "warmup_seconds": self.warmup_seconds,
                    "notes": self.notes,
                    "stages": [asdict(s) for s in self.stages],
                }
                with open(path, "w") as f:
                    json.dump(doc, f, indent=1)


class _TorchCudart:
    """Registration through ``torch.cuda.cudart()`` (holds the GIL): where libcudart is
    linked statically and ctypes cannot reach it."""

    def __init__(self, device: int) -> None:
        self.device = device

    def register(self, address: int, size: int) -> None:
        torch.cuda.set_device(self.device)
        err = int(torch.cuda.cudart().cudaHostRegister(address, size, hostmem.Cudart.PORTABLE))
        if err:
            raise hostmem.CudaError(f"cudaHostRegister of {size} bytes failed: cudaError {err}")

    def unregister(self, address: int) -> None:
        torch.cuda.set_device(self.device)
        err = int(torch.cuda.cudart().cudaHostUnregister(address))
        if err:
            raise hostmem.CudaError(f"cudaHostUnregister failed: cudaError {err}")


def _frombuffer(address: int, size: int) -> torch.Tensor:
    import ctypes

    return torch.frombuffer((ctypes.c_uint8 * size).from_address(address), dtype=torch.uint8)


def hugepin(runtime: Runtime) -> HugePinStrategy:
    """``hugepin``: the host copies are kept and reused every cycle."""
    return HugePinStrategy(runtime)


def relock(runtime: Runtime) -> HugePinStrategy:
    """``relock``: ``hugepin``, handing its host memory back after every load."""
    return HugePinStrategy(runtime, ephemeral=True)
