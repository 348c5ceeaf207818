"""PyTorch's pinned host allocator statistics, read the same way on every torch version.

``torch.cuda.host_memory_stats()`` has had two key schemas. Older torch reports
``reserved_bytes`` (blocks owned, in use or cached) next to ``allocated_bytes`` (in use);
newer torch reports ``allocated_bytes`` for blocks owned and ``active_bytes`` for those
handed out. The owned figure is right in both: it moves only where a block is made
(``cudaHostAlloc``) or given back (``empty_cache``).

The in-use figure is not. Up to torch 2.11 (read in its CachingHostAllocator source; its
fix, pytorch#171662, is in the 2.13 source), a block freed without pending stream events
is put back in the cache without lowering the active counters at all, and one freed
through its events (any block a ``non_blocking`` copy used) lowers ``active_bytes`` by
the function's size argument, -1, which raises it by one byte. Every reuse of a cached
block raises them again. On the H200 (torch 2.11) ``active_bytes.current`` climbed 1.98x
-> 3.96x -> 5.94x over three offload cycles of verl's FSDP2 offload while the owned bytes
and RSS stayed flat. The old schema's in-use counter has the same event-path fault.

So the in-use figure is read only where the counters are known to count frees: the
``active_bytes`` schema from torch 2.13 on, and even there only while the dict does not
contradict itself (in use above owned, or a negative ``freed`` total, which only the
faulty decrement makes). Elsewhere it is None, and :func:`in_use_note` says why.
Torch-free: the attach probe, the sampler and the pinned probe all read through here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COUNTS_FREES_FROM = (2, 13)
"""The first torch release whose host allocator lowers its active counters on every free
(2.11 measured wrong on the H200; 2.12 not checked, so not trusted)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PinnedFigures:
    """What the pinned allocator holds, in this project's names."""

    reserved: int
    """Bytes of blocks the allocator owns, in use or cached (rounded sizes)."""
    in_use: int | None
    """Bytes of blocks handed out to tensors; None where this torch's counters are wrong."""
    reserved_peak: int
    schema: str
    """``reserved_bytes`` (older torch) or ``active_bytes`` (newer)."""


def torch_release(version: str | None) -> tuple[int, int] | None:
    """``(major, minor)`` of a torch version string (``2.13.0+cpu``); None if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def counts_frees(version: str | None) -> bool:
    """Whether this torch version's active counters fall when a pinned block is freed."""
    release = torch_release(version)
    return release is not None and release >= COUNTS_FREES_FROM


def _int(stats: Mapping[str, Any], key: str) -> int:
    return int(stats.get(key, 0) or 0)


def read(stats: Mapping[str, Any], version: str | None) -> PinnedFigures:
    """The figures from ``host_memory_stats()``'s flat keys under torch ``version``."""
    if "reserved_bytes.current" in stats:
        return PinnedFigures(
            reserved=_int(stats, "reserved_bytes.current"),
            in_use=None,  # its in-use counter misses event-path frees in every such release
            reserved_peak=_int(stats, "reserved_bytes.peak"),
            schema="reserved_bytes",
        )
    owned, active = _int(stats, "allocated_bytes.current"), _int(stats, "active_bytes.current")
    consistent = active <= owned and _int(stats, "active_bytes.freed") >= 0
    return PinnedFigures(
        reserved=owned,
        in_use=active if counts_frees(version) and consistent else None,
        reserved_peak=_int(stats, "allocated_bytes.peak"),
        schema="active_bytes",
    )


def flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``host_memory_stats_as_nested_dict()``'s form as ``host_memory_stats()``'s keys."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def in_use_note(version: str | None) -> str | None:
    """A line for a run's notes where the in-use figure is not read; None where it is."""
    if counts_frees(version):
        return None
    return (
        f"pinned in use: not read on torch {version or '?'} (its host_memory_stats "
        "do not lower active_bytes when a block is freed); pinned owned is read"
    )
