"""PyTorch's pinned host caching allocator as accounting: rounding rules and a replay.

Read from torch 2.13.0 (``ATen/core/CachingHostAllocator.h`` as installed, and
``aten/src/ATen/cuda/CachingHostAllocator.cpp``):

* ``allocate(size)`` rounds ``size`` up with ``c10::llvm::PowerOf2Ceil`` when
  ``size <= pinned_max_round_threshold`` and ``size <= pinned_max_cached_size``; both
  default to ``SIZE_MAX`` and are set with ``PYTORCH_ALLOC_CONF`` keys
  ``pinned_max_round_threshold_mb`` / ``pinned_max_cached_size_mb`` (MiB). torch 2.11.0
  has neither option and rounds every size (``HostAllocatorConfig()`` models both);
* it first pops the most recently freed block of free list ``ceil(log2(rounded))``;
  only when that list is empty does it call ``cudaHostAlloc(rounded)`` (or ``malloc`` plus
  ``cudaHostRegister(rounded)`` with ``pinned_use_cuda_host_register``). Blocks are never
  split or merged;
* a freed block goes back on its free list and stays resident until
  ``torch._C._host_emptyCache()``, unless it is larger than ``pinned_max_cached_size``,
  in which case it is released at once.

Not modelled: CUDA events that delay reuse of a block still used by a stream (the replay
assumes every copy has completed), private pools of CUDA graph capture, and the
``pinned_reserve_segment_size_mb`` bump allocator.

A request above the round threshold is not rounded, but still indexes free lists by
``ceil(log2(size))``, and ``get_free_block`` takes a block from that list without
comparing sizes: such a request can be handed a smaller cached block. The replay counts
those as ``undersized_reuses`` rather than hiding them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

PAGE_SIZE = 4096
"""Host page size the kernel accounts resident memory in (x86-64 default)."""

HostKind = Literal["pinned", "pageable", "registered"]
PAGE_LOCKED: frozenset[str] = frozenset({"pinned", "registered", "cached"})
"""Holding kinds whose pages are locked: PyTorch's pinned blocks, in use or cached, and
ranges registered with cudaHostRegister."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostAllocatorConfig:
    """The ``PYTORCH_ALLOC_CONF`` options that change pinned-allocator accounting."""

    max_round_threshold: int | None = None
    """Bytes (``pinned_max_round_threshold_mb`` x MiB); None: round every size (default)."""
    max_cached_size: int | None = None
    """Bytes (``pinned_max_cached_size_mb`` x MiB); None: cache every freed block (default)."""

    def rounds(self, nbytes: int) -> bool:
        return all(
            limit is None or nbytes <= limit
            for limit in (self.max_round_threshold, self.max_cached_size)
        )

    def caches(self, nbytes: int) -> bool:
        return self.max_cached_size is None or nbytes <= self.max_cached_size


DEFAULT_CONFIG = HostAllocatorConfig()


def power_of_two_ceil(n: int) -> int:
    """Smallest power of two >= ``n`` (``c10::llvm::PowerOf2Ceil``; 0 stays 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def pinned_block_size(nbytes: int, config: HostAllocatorConfig = DEFAULT_CONFIG) -> int:
    """Bytes of the block the pinned allocator hands out for a ``nbytes`` request."""
    return power_of_two_ceil(nbytes) if config.rounds(nbytes) else nbytes


def free_list_index(block_size: int) -> int:
    """Free list a block lives on: ``Log2_64_Ceil(size)``."""
    return (block_size - 1).bit_length() if block_size > 1 else 0


def page_rounded(nbytes: int, page_size: int = PAGE_SIZE) -> int:
    """Resident bytes of ``nbytes`` of touched memory: whole pages.

    That is what ``cudaHostRegister`` locks for an exact-size host buffer, and what a
    pageable copy occupies once written.
    """
    return -(-nbytes // page_size) * page_size


def resident_bytes(
    nbytes: int, kind: HostKind, config: HostAllocatorConfig = DEFAULT_CONFIG
) -> int:
    """Host bytes one allocation of ``nbytes`` holds, by how it was made."""
    if kind == "pinned":
        return page_rounded(pinned_block_size(nbytes, config))
    return page_rounded(nbytes)


# ---------------------------------------------------------------- replay


@dataclass(frozen=True, kw_only=True, slots=True)
class Alloc:
    """``name`` gets ``nbytes`` of host memory made the ``kind`` way."""

    name: str
    nbytes: int
    kind: HostKind = "pinned"


@dataclass(frozen=True, kw_only=True, slots=True)
class Free:
    """The tensor ``name`` is released (a pinned block returns to the cache)."""

    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class EmptyCache:
    """``torch._C._host_emptyCache()``: cached pinned blocks are released."""


Event = Alloc | Free | EmptyCache


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """Host memory right after one event."""

    event: Event
    resident: int
    """All host bytes the replay holds: pinned blocks (in use or cached) and the rest."""
    pinned_in_use: int
    pinned_cached: int
    reused: bool = False
    """The event was an allocation served from the pinned cache."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Holding:
    """One thing resident at a moment of the replay: a live allocation or a cached block."""

    name: str
    """The allocation's name, or ``cached pinned block`` for a freed one the cache keeps."""
    kind: HostKind | Literal["cached"]
    nbytes: int
    """Resident bytes (page-rounded; the whole rounded block for pinned memory)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    """The outcome of replaying events through the allocator model."""

    steps: tuple[Step, ...]
    host_allocs: int
    """Pinned slow-path allocations (``cudaHostAlloc`` / ``cudaHostRegister`` calls)."""
    undersized_reuses: int
    """Cache hits that returned a block smaller than requested (unrounded sizes only)."""
    peak_index: int = -1
    """Index of the first step where ``resident`` reached ``peak`` (-1: no steps)."""
    peak_holdings: tuple[Holding, ...] = ()
    """What was resident at that step; the ``nbytes`` add up to ``peak``."""
    final_holdings: tuple[Holding, ...] = ()
    """What was resident after the last event; adds up to ``final``."""

    @property
    def peak(self) -> int:
        return max((s.resident for s in self.steps), default=0)

    @property
    def final(self) -> int:
        return self.steps[-1].resident if self.steps else 0

    def peak_between(self, start: int, stop: int) -> int:
        """Peak over ``steps[start:stop]`` (e.g. one offload phase)."""
        return max((s.resident for s in self.steps[start:stop]), default=0)


@dataclass(kw_only=True, slots=True)
class _State:
    live: dict[str, tuple[HostKind, int]] = field(default_factory=dict)
    free_lists: dict[int, list[int]] = field(default_factory=dict)
    other: int = 0
    in_use: int = 0
    cached: int = 0
    host_allocs: int = 0
    undersized: int = 0


def _holdings(state: _State) -> tuple[Holding, ...]:
    live = [
        Holding(name=name, kind=kind, nbytes=page_rounded(size))
        for name, (kind, size) in state.live.items()
    ]
    cached = [
        Holding(name="cached pinned block", kind="cached", nbytes=page_rounded(size))
        for sizes in state.free_lists.values()
        for size in sizes
    ]
    return (*live, *cached)


def replay(events: Iterable[Event], config: HostAllocatorConfig = DEFAULT_CONFIG) -> Replay:
    """Apply ``events`` in order; resident bytes after each one, and counters."""
    state, steps = _State(), []
    peak_index, peak_holdings = -1, ()
    for event in events:
        reused = False
        if isinstance(event, Alloc):
            reused = _alloc(state, event, config)
        elif isinstance(event, Free):
            _free(state, event, config)
        else:
            state.cached = 0
            state.free_lists.clear()
        steps.append(
            Step(
                event=event,
                resident=state.other + state.in_use + state.cached,
                pinned_in_use=state.in_use,
                pinned_cached=state.cached,
                reused=reused,
            )
        )
        if peak_index < 0 or steps[-1].resident > steps[peak_index].resident:
            peak_index, peak_holdings = len(steps) - 1, _holdings(state)
    return Replay(
        steps=tuple(steps),
        host_allocs=state.host_allocs,
        undersized_reuses=state.undersized,
        peak_index=peak_index,
        peak_holdings=peak_holdings,
        final_holdings=_holdings(state),
    )


def _alloc(state: _State, event: Alloc, config: HostAllocatorConfig) -> bool:
    if event.name in state.live:
        raise ValueError(f"{event.name!r} is allocated twice without a Free in between")
    if event.nbytes <= 0:
        raise ValueError(f"{event.name!r}: allocation size must be positive")
    if event.kind != "pinned":
        size = page_rounded(event.nbytes)
        state.live[event.name] = (event.kind, size)
        state.other += size
        return False
    size = pinned_block_size(event.nbytes, config)
    cached = state.free_lists.get(free_list_index(size))
    reused = bool(cached)
    if cached:
        size = cached.pop()
        state.cached -= page_rounded(size)
        state.undersized += size < event.nbytes
    else:
        state.host_allocs += 1
    state.live[event.name] = ("pinned", size)
    state.in_use += page_rounded(size)
    return reused


def _free(state: _State, event: Free, config: HostAllocatorConfig) -> None:
    if event.name not in state.live:
        raise ValueError(f"{event.name!r} is freed but not allocated")
    kind, size = state.live.pop(event.name)
    if kind != "pinned":
        state.other -= size
        return
    state.in_use -= page_rounded(size)
    if config.caches(size):
        state.free_lists.setdefault(free_list_index(size), []).append(size)
        state.cached += page_rounded(size)
