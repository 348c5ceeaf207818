"""``pipelined``: ``registered``'s exact-size page-locked host buffers, made fast on the first
offload by preparing them in chunks on worker threads while earlier chunks copy.

(``--strategy-option threads=N``, ``chunk_mib=N`` and ``huge_pages=1`` override the
defaults, for benchmark sweeps.)

``registered`` pays for its host memory inside the first offload: every page is faulted
in (zeroed by the kernel) and then pinned by ``cudaHostRegister``, one thread, 4 KiB at
a time. Here each DDP buffer gets one anonymous mapping of exactly its bytes (rounded to
whole pages; transparent huge pages on request); the mapping is cut into chunks of
``CHUNK_BYTES``, and a pool of ``THREADS`` workers populates each chunk
(``MADV_POPULATE_WRITE``, or a ``memset`` where the kernel lacks it) and registers it with
CUDA. The main thread issues each chunk's device-to-host copy as soon as its chunk is
ready, so page-locking overlaps the copies. Later offloads copy chunk by chunk into the
same memory. Host memory: the payload, exactly, once.

Each parameter outside the DDP buffers (frozen ones, a reference model's:
``engine/model/sources.py``) is one more source: its own exact mapping, prepared and
copied the same way (a mapping is whole pages, so a small parameter holds up to 4 KiB
more than its bytes).

Copies stay within one registered chunk each, so every one is a direct DMA. The chunks
are unregistered and the mappings unmapped in ``close()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from offloadprobe.core.errors import OffloadProbeError, UsageError
from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.model.buffers import nbytes
from offloadprobe.engine.model.sources import Source, to_load_sources, to_offload_sources
from offloadprobe.layout.pinned import Alloc, Event

if TYPE_CHECKING:
    import torch

    from offloadprobe.engine.runtime import Runtime

CHUNK_BYTES = 256 * 2**20
"""Bytes populated and registered per task (keep it a multiple of the 2 MiB huge page);
``--strategy-option chunk_mib=N`` overrides it."""
THREADS = 8
"""Workers populating and registering chunks (``--strategy-option threads=N``)."""
HUGE_PAGES = False
"""Advise transparent huge pages for the mappings (fewer pages to fault and pin, up to
2 MiB more resident per mapping); ``--strategy-option huge_pages=1``."""
_PORTABLE = 1  # cudaHostRegisterPortable
_MADV_HUGEPAGE = 14
_MADV_POPULATE_WRITE = 23  # Linux 5.14+

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


@dataclass(slots=True)
class HostMapping:
    """One anonymous mapping holding one source's host copy (a DDP buffer's or a loose
    parameter's), in chunks."""

    address: int
    length: int
    """Mapped bytes (whole pages)."""
    nbytes: int
    """Payload bytes."""
    host: torch.Tensor
    chunks: list[tuple[int, int]] = field(default_factory=list)
    """``(offset, nbytes)`` of each chunk, in payload bytes."""
    registered: list[int] = field(default_factory=list)
    """Addresses of the chunks registered with CUDA."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Tuning:
    """The pipeline's knobs, from ``--strategy-option`` (defaults above)."""

    threads: int = THREADS
    chunk_bytes: int = CHUNK_BYTES
    huge_pages: bool = HUGE_PAGES

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Tuning:
        known = {"threads", "chunk_mib", "huge_pages"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UsageError(
                f"--strategy-option {unknown[0]}: pipelined takes threads, chunk_mib, huge_pages"
            )
        try:
            threads = int(options.get("threads", THREADS))
            chunk = int(options["chunk_mib"]) * 2**20 if "chunk_mib" in options else CHUNK_BYTES
        except ValueError:
            raise UsageError("--strategy-option threads= and chunk_mib= take integers") from None
        if threads < 1 or chunk < mmap.PAGESIZE:
            raise UsageError("--strategy-option threads must be >= 1 and chunk_mib >= 1")
        huge = options.get("huge_pages", "1" if HUGE_PAGES else "0") in ("1", "true", "yes")
        return cls(threads=threads, chunk_bytes=chunk, huge_pages=huge)


def map_host(
    like: torch.Tensor, chunk_bytes: int | None = None, *, huge_pages: bool = HUGE_PAGES
) -> HostMapping:
    """An exact-size anonymous mapping viewed as a tensor shaped like ``like`` (no pages yet)."""
    import torch

    size, chunk_bytes = nbytes(like), chunk_bytes or CHUNK_BYTES
    length = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = _libc.mmap(None, length, prot, flags, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OffloadProbeError(f"mmap of {length} bytes failed: errno {ctypes.get_errno()}")
    if huge_pages:
        _libc.madvise(address, length, _MADV_HUGEPAGE)  # best effort
    raw = (ctypes.c_uint8 * size).from_address(address)
    host = torch.frombuffer(raw, dtype=torch.uint8).view(like.dtype).view(like.shape)
    chunks = [(o, min(chunk_bytes, size - o)) for o in range(0, size, chunk_bytes)]
    return HostMapping(address=address, length=length, nbytes=size, host=host, chunks=chunks)


def _populate(address: int, length: int) -> None:
    if _libc.madvise(address, length, _MADV_POPULATE_WRITE) != 0:
        ctypes.memset(address, 0, length)  # older kernels: touch every page


class PipelinedStrategy:
    """Exact host mappings, populated and registered in parallel chunks during the copy."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.tuning = Tuning.from_options(getattr(runtime, "strategy_options", {}) or {})
        self.mappings: dict[int, HostMapping] = {}
        self.registered_bytes = 0
        """Bytes page-locked outside PyTorch's pinned allocator."""
        self._cudart: Any = None
        self._device = 0

    def _prepare(self, mapping: HostMapping, offset: int, size: int) -> tuple[int, int]:
        address = mapping.address + offset
        _populate(address, size)
        if self._cudart is not None:
            import torch

            torch.cuda.set_device(self._device)  # a worker thread starts on device 0
            err = int(self._cudart.cudaHostRegister(address, size, _PORTABLE))
            if err != 0:
                raise OffloadProbeError(f"cudaHostRegister of {size} bytes failed: cudaError {err}")
        return offset, size

    @staticmethod
    def _chunk(tensor: torch.Tensor, offset: int, size: int) -> torch.Tensor:
        import torch

        return tensor.view(-1).view(torch.uint8)[offset : offset + size]

    def _first_offload(self, work: list[tuple[Source, HostMapping]]) -> None:
        if self.runtime.can_pin:
            import torch

            self._cudart, self._device = torch.cuda.cudart(), torch.cuda.current_device()
        with ThreadPoolExecutor(max_workers=self.tuning.threads) as pool:
            futures = {
                pool.submit(self._prepare, m, o, n): (source, m)
                for source, m in work
                for o, n in m.chunks
            }
            for future in as_completed(futures):
                source, m = futures[future]
                offset, size = future.result()
                if self.runtime.can_pin:
                    m.registered.append(m.address + offset)
                    self.registered_bytes += size
                self._chunk(m.host, offset, size).copy_(
                    self._chunk(source.data, offset, size), non_blocking=True
                )

    def _mapping(self, source: Source) -> HostMapping:
        m = self.mappings[source.key]
        if m.nbytes != source.nbytes:
            raise OffloadProbeError(
                f"host mapping of {m.nbytes} bytes no longer matches its {source.kind} of "
                f"{source.nbytes} bytes: the model was rebuilt"
            )
        return m

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        moving = to_offload_sources(models)  # DDP buffers, then parameters outside them
        tuning = self.tuning
        new = [
            (s, map_host(s.data, tuning.chunk_bytes, huge_pages=tuning.huge_pages))
            for s in moving
            if s.key not in self.mappings
        ]
        if new:  # the first offload of these sources: prepared while they copy
            self.mappings.update({s.key: m for s, m in new})
            self._first_offload(new)
        fresh = {s.key for s, _ in new}
        for source in moving:
            if source.key in fresh:
                continue
            m = self._mapping(source)
            for offset, size in m.chunks:
                self._chunk(m.host, offset, size).copy_(
                    self._chunk(source.data, offset, size), non_blocking=True
                )
        self.runtime.synchronize()  # every copy lands before any device storage is freed
        for source in moving:
            source.free()

    def load(self, models: list[Any]) -> None:
        for source in to_load_sources(models):
            m = self._mapping(source)
            source.restore()
            for offset, size in m.chunks:
                self._chunk(source.data, offset, size).copy_(
                    self._chunk(m.host, offset, size), non_blocking=True
                )
            source.restore_grads()
        self.runtime.synchronize()

    def close(self) -> None:
        """Unregister every chunk, then unmap the host memory."""
        import torch

        for m in self.mappings.values():
            for address in m.registered:
                torch.cuda.cudart().cudaHostUnregister(address)
            m.host = torch.empty(0)
            _libc.munmap(m.address, m.length)
        self.mappings.clear()
        self.registered_bytes = 0


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """One exact page-locked host copy per buffer on the first offload, reused afterwards."""
    return [
        Alloc(name=f"{name} host mapping", nbytes=n, kind="registered")
        for name, n in zip(labels, payloads, strict=True)
    ]


STRATEGY = ModelStrategyInfo(
    name="pipelined",
    summary="registered, page-locked in chunks on threads during the copy",
    factory=PipelinedStrategy,
    host_events=host_events,
    emulation="chunks are populated on threads but not page-locked; copies are host copies",
    check_options=Tuning.from_options,
)
