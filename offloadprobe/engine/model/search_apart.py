"""The content search (``param_copies``), run where its memory is nobody's figure.

On a GPU the search reads device memory with device kernels, and its host side is a few
small tensors. In CPU emulation the device is host memory, and so is every byte of the
search's own work: the anchors (about 3.5 MiB at any payload up to 1 GiB), the sampling's
temporaries, the digests of the allocations made before the build. Made in the measured
process they were in its RSS and its cgroup, outside the zero, and glibc kept some of
their pages after each cycle: at an 8 MiB payload an honest ``lazy`` read 1.82x host peak
and 1.45x steady for 1.06x and 1.03x without the search (``make run``, CPU emulation).

So in CPU emulation (:class:`ApartSearch`):

- the anchors live in one shared anonymous mapping (:class:`AnchorStore`), made and
  written through once, before the zero: every host figure's baseline holds it, a
  constant, as it holds the emulated device's ballast;
- taking anchors and searching each run in a child forked between two phases. The child
  reads the measured process's memory as it is (copy on write: reading copies nothing),
  writes the anchors into the mapping or sends what it found through a pipe, and exits;
  the parent waits for it, so it is gone before the next phase starts. Its own pages are
  charged to the worker's cgroup while it lives, between phases, where no figure reads;
- the measured process itself allocates nothing for the search but the answer.

Measured (``make run``'s rows, CPU emulation, 2-core host, cgroup v1): ``lazy`` reads
1.04x to 1.08x host peak and 0.99x to 1.05x steady at 8 MiB with the search apart, 1.06x
and 1.03x with no search at all, 1.82x and 1.45x with the search in the process. Two
kernel effects of the fork are handled: :func:`_settle` waits for what a reaped child
leaves charged a while, and ``measure.threshold_sync`` keeps the child's pages from
reading as the next phase's peak.

The child runs one intra-op thread (a forked process must not use the parent's OpenMP
pool), no garbage collection (a finalizer of the parent's objects must not run twice)
and dies with its parent. A child that fails sends its error, raised here as it was.

On CUDA, :class:`InProcessSearch`: the search as it always ran, in the measured process.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import pickle
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import torch

from offloadprobe.engine.model import param_copies
from offloadprobe.engine.model.device_regions import Region
from offloadprobe.engine.runtime.glibc_malloc import trim_host_heap

T = TypeVar("T")
Kept = Callable[[], list[tuple[int, int]]] | None
"""Allocations left out of a search, listed where the search runs."""
HEADER = 4
"""int64 words before the buffers' table: valid, anchors kept, spacing, buffers."""
MAX_BUFFERS = 4096
"""Buffers the store can hold anchors of (FSDP2 keeps one per parameter shard)."""


class ContentSearch(Protocol):
    """Anchors of the parameters' bytes before an offload; where they are after it."""

    def take(self, buffers: list[torch.Tensor], device_bytes: int) -> bool:
        """Anchors of ``buffers`` as they are now; False where there is nothing to find."""
        ...

    def find(
        self, regions: list[Region], exclude: Iterable[tuple[int, int]], kept: Kept = None
    ) -> dict[int, int]:
        """``{address: bytes of the parameters found there}`` outside ``exclude`` and
        what ``kept()`` lists (read where the search runs)."""
        ...


class InProcessSearch:
    """The search in the measured process (CUDA: its work is the device's)."""

    def __init__(self) -> None:
        self.anchors: param_copies.Anchors | None = None

    def take(self, buffers: list[torch.Tensor], device_bytes: int) -> bool:
        previous, self.anchors = self.anchors, None
        self.anchors = param_copies.take_anchors(buffers, device_bytes, previous)
        if self.anchors is not None and self.anchors is not previous:
            trim_host_heap()  # the temporaries, freed: given back before a strategy runs
        return self.anchors is not None

    def find(
        self, regions: list[Region], exclude: Iterable[tuple[int, int]], kept: Kept = None
    ) -> dict[int, int]:
        if self.anchors is None:
            return {}
        skip = [*exclude, *(kept() if kept is not None else [])]
        return param_copies.find(self.anchors, regions, skip)


class AnchorStore:
    """One shared anonymous mapping of int64 words, resident from its making: a header,
    each buffer's first anchor and bytes, then the anchors' positions and values."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        words = HEADER + 2 * (MAX_BUFFERS + 1) + 2 * capacity
        self.nbytes = -(-words * 8 // mmap.PAGESIZE) * mmap.PAGESIZE
        self._map = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        for offset in range(0, self.nbytes, mmap.PAGESIZE):  # resident now, in the zero
            self._map[offset] = 0
        self.words = torch.frombuffer(self._map, dtype=torch.int64)

    def _parts(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        table = HEADER + 2 * (MAX_BUFFERS + 1)
        starts = self.words[HEADER : HEADER + MAX_BUFFERS + 1]
        sizes = self.words[HEADER + MAX_BUFFERS + 1 : table]
        positions = self.words[table : table + self.capacity]
        values = self.words[table + self.capacity : table + 2 * self.capacity]
        return starts, sizes, positions, values

    def write(self, anchors: param_copies.Anchors | None) -> None:
        """Keep ``anchors`` (None: there are none)."""
        self.words[0] = 0
        if anchors is None:
            return
        n, buffers = anchors.values.numel(), len(anchors.sizes)
        if n > self.capacity or buffers > MAX_BUFFERS:
            raise RuntimeError(f"{n} anchors of {buffers} buffers: the store holds fewer")
        starts, sizes, positions, values = self._parts()
        starts[: buffers + 1] = torch.tensor(anchors.starts, dtype=torch.int64)
        sizes[:buffers] = torch.tensor(anchors.sizes, dtype=torch.int64)
        positions[:n] = anchors.positions
        values[:n] = anchors.values
        self.words[1:4] = torch.tensor([n, anchors.spacing, buffers], dtype=torch.int64)
        self.words[0] = 1

    def read(self) -> param_copies.Anchors | None:
        """The anchors kept, as tensors of their own (None: none kept)."""
        if not int(self.words[0]):
            return None
        n, spacing, buffers = (int(x) for x in self.words[1:4])
        starts, sizes, positions, values = self._parts()
        return param_copies.rebuilt(
            spacing=spacing,
            positions=positions[:n].clone(),
            values=values[:n].clone(),
            starts=tuple(int(x) for x in starts[: buffers + 1]),
            sizes=tuple(int(x) for x in sizes[:buffers]),
        )


class ChildFailed(RuntimeError):
    """The search's child ended without an answer."""


def in_child(work: Callable[[], T]) -> T:
    """``work()`` run in a forked child that exits when it is done; its result (or its
    exception, raised here) comes back pickled through a pipe."""
    group = _own_group()
    before = _readings(group)
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child: coverage does not follow it)
        _child(work, read_end, write_end, parent)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(1 << 16):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    _settle(group, before)
    if not chunks:
        raise ChildFailed(f"the content search's child ended with status {status}, no answer")
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        raise value
    return value


SETTLE_S = 0.5
"""Longest wait for the kernel to take back a reaped child's kernel memory."""
SLACK = 128 * 1024
"""Bytes above a reading before the fork that count as settled (per-CPU batches)."""


def _own_group() -> Any:
    """This process's memory cgroup where it is the group of this process and what it
    started (a worker's own: its figures come from it), else None (a group shared with
    others, whose usage any wait would follow: this process's figures are its own)."""
    import psutil

    from offloadprobe.measure.cgroup import own_group

    with contextlib.suppress(OSError, ValueError, psutil.Error):
        group = own_group()
        if group is None:
            return None
        me = psutil.Process()
        ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
        return group if set(group.pids()) <= ours else None
    return None


def _kernel_bytes(group: Any) -> int | None:
    """The group's kernel memory (page tables among it): v1's ``memory.kmem.usage_in_
    bytes``, v2's ``kernel`` (else ``pagetables``) of ``memory.stat``; None: not read."""
    if group is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        if group.version == 1:
            return int((group.path / "memory.kmem.usage_in_bytes").read_text())
        stat = group.stat()
        return stat.get("kernel", stat.get("pagetables"))
    return None


def _readings(group: Any) -> tuple[int, int | None] | None:
    """``(usage, kernel bytes)`` of the group now; None where it has none readable."""
    if group is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        return group.usage(), _kernel_bytes(group)
    return None


def _settle(group: Any, before: tuple[int, int | None] | None) -> None:
    """Wait until the group's kernel memory (its usage, where that is not read) is back
    to its reading before the fork. A reaped child's page tables (about 1 MiB for 350 MB
    of anonymous memory) are freed after an RCU grace period, 9 to 22 ms later on the
    2-core host: read at once, the next phase's starting figure would include them, and
    every figure after it would read low (``lazy`` at 8 MiB: 0.83x steady for 1.01x).
    Kernel memory, not usage: a helper process of the strategy's in the group moves
    usage, hardly this. Limit: a wait that runs out (``SETTLE_S``, over 20 times the
    longest measured) leaves what was still charged in the next figures' start."""
    if before is None:
        return
    usage, kernel = before
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        now = _readings(group)
        if now is None:
            break
        if (now[0] <= usage + SLACK) if kernel is None else ((now[1] or 0) <= kernel + SLACK):
            break
        time.sleep(0.001)


def _child(work: Callable[[], Any], read_end: int, write_end: int, parent: int) -> None:
    from offloadprobe.engine.forking import die_with_parent

    gc.disable()
    code = 0
    try:
        os.close(read_end)
        die_with_parent()
        if os.getppid() != parent:
            os._exit(1)
        torch.set_num_threads(1)
        answer = pickle.dumps((True, work()))
    except BaseException as exc:
        code = 1
        try:
            answer = pickle.dumps((False, exc))
        except Exception:  # an exception that does not pickle: its words
            answer = pickle.dumps((False, ChildFailed(f"{type(exc).__name__}: {exc}")))
    with contextlib.suppress(OSError):
        view = memoryview(answer)
        while view:
            view = view[os.write(write_end, view) :]
    os._exit(code)


class ApartSearch:
    """The search in forked children, its anchors in an :class:`AnchorStore` (CPU
    emulation: see the module)."""

    def __init__(self, store: AnchorStore) -> None:
        self.store = store

    @classmethod
    def made(cls, buffers: list[torch.Tensor], device_bytes: int) -> ApartSearch:
        """A search with room for the anchors of ``buffers`` on a device up to four
        times ``device_bytes`` (the optimizer's state comes later)."""
        words = sum(t.numel() * t.element_size() for t in buffers) // 8
        return cls(AnchorStore(param_copies.anchor_count(4 * device_bytes, max(1, words))))

    def take(self, buffers: list[torch.Tensor], device_bytes: int) -> bool:
        store, capacity = self.store, self.store.capacity

        def work() -> bool:
            previous = store.read()  # kept only once found where their buffers are
            anchors = param_copies.take_anchors(buffers, device_bytes, previous, limit=capacity)
            if anchors is not previous:
                store.write(anchors)
            return anchors is not None

        return in_child(work)

    def find(
        self, regions: list[Region], exclude: Iterable[tuple[int, int]], kept: Kept = None
    ) -> dict[int, int]:
        store, skip = self.store, list(exclude)

        def work() -> dict[int, int]:
            anchors = store.read()
            if anchors is None:
                return {}
            return param_copies.find(anchors, regions, [*skip, *(kept() if kept else [])])

        return in_child(work) if int(self.store.words[0]) else {}


def search_for(runtime: Any, buffers: list[torch.Tensor], device_bytes: int) -> ContentSearch:
    """The run's search, made before its zero: apart in CPU emulation, else in process."""
    if getattr(runtime, "device_memory", None) is not None and hasattr(os, "fork"):
        return ApartSearch.made(buffers, device_bytes)
    return InProcessSearch()
