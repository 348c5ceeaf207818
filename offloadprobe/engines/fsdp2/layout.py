"""FSDP2's per-rank shard layout, and the pinned host memory verl's FSDP2 offload takes.

Torch-free (``plan`` reads it). Read from torch 2.13's ``fully_shard`` (``FSDPParam.
_init_sharded_param`` and ``reset_sharded_param``):

- each parameter is sharded on dim 0 in chunks of ``ceil(dim0 / N)`` rows (``torch.
  chunk``): rank ``r`` holds ``clamp(dim0 - r * ceil(dim0 / N), 0, ceil(dim0 / N))``
  rows, and every rank's storage is padded with zeros to the full chunk (the last ranks
  carry the padding; a rank past the end holds padding only);
- AdamW's moments are made from the local shard (``zeros_like``): unpadded;
- verl's FSDP2 offload, ``model.to("cpu", non_blocking=True)``, asks the caching host
  allocator for one pinned block per local shard (rounded up to a power of two,
  ``layout.pinned``), and its optimizer offload one per moment. At the end of each
  ``fully_shard`` unit's ``_apply``, ``reset_sharded_param()`` replaces every shard whose
  local rows fall short of the chunk with a zero-padded pageable copy (``new_zeros``),
  and the shard's pinned block goes back to the allocator's cache, where a later shard
  or moment of the same size class takes it. The load frees every host tensor; the
  pinned blocks stay cached, page-locked, for the rest of the job.

:func:`rank_layout` replays those allocations through ``layout.pinned.replay``, so the
cache reuse is the allocator's own rule, not an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from offloadprobe.layout.pinned import (
    DEFAULT_CONFIG,
    Alloc,
    Event,
    Free,
    HostAllocatorConfig,
    page_rounded,
    replay,
)

Shape = tuple[int, ...]
MOMENTS = ("exp_avg", "exp_avg_sq")
ARENA_ALIGN = 512
"""The ``exact`` rows' slice alignment (``strategies/host_arena.py``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Tensor:
    """One parameter: its name, full shape and bytes per element (fp32 masters: 4)."""

    name: str
    shape: Shape
    itemsize: int = 4


Unit = Sequence[Tensor]
"""The parameters of one ``fully_shard``'ed module (a decoder block, the root's rest)."""


def chunk_rows(dim0: int, shards: int) -> int:
    """Rows of every rank's (padded) chunk: ``ceil(dim0 / shards)``."""
    if shards < 1 or dim0 < 0:
        raise ValueError(f"shards must be >= 1 and dim 0 >= 0, got {shards} and {dim0}")
    return -(-dim0 // shards)


def local_rows(dim0: int, shards: int, rank: int) -> int:
    """Rows rank ``rank`` of ``shards`` really holds (the rest of its chunk is padding)."""
    if not 0 <= rank < shards:
        raise ValueError(f"rank {rank} is not one of {shards} shards")
    chunk = chunk_rows(dim0, shards)
    return max(0, min(chunk, dim0 - rank * chunk))


@dataclass(frozen=True, kw_only=True, slots=True)
class Shard:
    """One parameter's shard on one rank, in bytes."""

    name: str
    local: int
    """Bytes of the rows it holds: what ``.to("cpu")`` of its local tensor asks for."""
    padded: int
    """Bytes of its padded storage on the device."""

    @property
    def uneven(self) -> bool:
        return self.local < self.padded


def shard(tensor: Tensor, shards: int, rank: int) -> Shard:
    """``tensor``'s shard on ``rank``."""
    row = prod(tensor.shape[1:]) * tensor.itemsize
    dim0 = tensor.shape[0] if tensor.shape else 1
    return Shard(
        name=tensor.name,
        local=local_rows(dim0, shards, rank) * row,
        padded=chunk_rows(dim0, shards) * row,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLayout:
    """One rank's shards and what verl's FSDP2 offload holds for them."""

    rank: int
    shards: int
    tensors: int
    uneven: int
    """Shards whose local rows fall short of the chunk: they lose their pinning."""
    param_bytes: int
    """Local (unpadded) parameter bytes."""
    padding_bytes: int
    """Zero rows the device storages carry beyond them."""
    moment_bytes: int
    requested: int
    """What the offload moves: local parameter shards plus both moments."""
    pinned_held: int
    """Pinned bytes PyTorch's allocator owns after the last load (all cached): held
    through training."""
    host_peak: int
    """Replayed host bytes at the worst moment (pinned blocks, cached ones, padded copies)."""
    exact_host: int
    """What the ``exact`` rows hold: each storage's bytes (padded shards, moments) in
    512-byte slices of one page-rounded arena."""

    @property
    def pinned_ratio(self) -> float:
        return self.pinned_held / self.requested if self.requested else 0.0

    @property
    def peak_ratio(self) -> float:
        return self.host_peak / self.requested if self.requested else 0.0


def _cycle_events(per_unit: list[list[Shard]], tag: str, grads: bool = False) -> list[Event]:
    """One offload (model, then optimizer, as verl calls them) and its loads. ``grads``:
    each shard's gradient is moved with it (``Module._apply`` moves ``param.grad`` right
    after the parameter), as after a train step that leaves them."""
    every = [s for unit in per_unit for s in unit]
    events: list[Event] = []
    home: dict[str, str] = {}  # shard -> the host tensor holding it now
    grad_homes: list[str] = []
    for unit in per_unit:
        for s in unit:
            if s.local:
                events.append(Alloc(name=f"{s.name}{tag}", nbytes=s.local, kind="pinned"))
                home[s.name] = f"{s.name}{tag}"
                if grads:
                    grad_homes.append(f"{s.name}/grad{tag}")
                    events.append(Alloc(name=grad_homes[-1], nbytes=s.local, kind="pinned"))
        for s in unit:  # reset_sharded_param at the end of the unit's _apply
            if s.uneven:
                padded = f"{s.name} padded{tag}"
                events.append(Alloc(name=padded, nbytes=s.padded, kind="pageable"))
                if s.local:
                    events.append(Free(name=home[s.name]))
                home[s.name] = padded
    moments = [f"{s.name}/{m}{tag}" for s in every for m in MOMENTS if s.local]
    sizes = [s.local for s in every for _ in MOMENTS if s.local]
    events += [Alloc(name=n, nbytes=b, kind="pinned") for n, b in zip(moments, sizes, strict=True)]
    events += [Free(name=home[s.name]) for s in every if s.name in home]  # the loads
    events += [Free(name=n) for n in grad_homes]
    events += [Free(name=n) for n in moments]
    return events


def verl_fsdp2_events(
    units: Sequence[Unit], shards: int, rank: int, cycles: int = 1, grads: bool = False
) -> list[Event]:
    """Host allocations and frees of ``cycles`` verl FSDP2 offload/load cycles on ``rank``
    (``grads``: each shard's gradient moved with it)."""
    per_unit = [[shard(t, shards, rank) for t in unit] for unit in units]
    return [e for cycle in range(cycles) for e in _cycle_events(per_unit, f"#{cycle}", grads)]


def rank_layout(
    units: Sequence[Unit],
    shards: int,
    rank: int,
    cycles: int = 2,
    config: HostAllocatorConfig = DEFAULT_CONFIG,
    grads: bool = False,
) -> RankLayout:
    """Rank ``rank``'s layout, and verl FSDP2's pinned bytes replayed over ``cycles``
    (``grads``: the gradients moved too, and counted in ``requested``)."""
    every = [shard(t, shards, rank) for unit in units for t in unit]
    result = replay(verl_fsdp2_events(units, shards, rank, cycles, grads), config)
    last = result.steps[-1] if result.steps else None
    params = sum(s.local for s in every)
    moments = len(MOMENTS) * params
    slices = [s.padded for s in every] + [s.local for s in every for _ in MOMENTS]
    return RankLayout(
        rank=rank,
        shards=shards,
        tensors=len(every),
        uneven=sum(s.uneven for s in every),
        param_bytes=params,
        padding_bytes=sum(s.padded - s.local for s in every),
        moment_bytes=moments,
        requested=params + moments + (params if grads else 0),
        pinned_held=(last.pinned_in_use + last.pinned_cached) if last else 0,
        host_peak=result.peak,
        exact_host=page_rounded(sum(-(-n // ARENA_ALIGN) * ARENA_ALIGN for n in slices)),
    )


def rank_layouts(units: Sequence[Unit], shards: int, cycles: int = 2) -> list[RankLayout]:
    """Every rank's layout (the last ranks carry the padding)."""
    return [rank_layout(units, shards, rank, cycles) for rank in range(shards)]
