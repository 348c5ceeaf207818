"""Device bytes that still hold the parameters after an offload, found by their content.

A copy of ``param_data`` is the parameters' wherever it hangs: a plain attribute on a
main parameter, a tensor in the optimizer's state, a module attribute, a staging buffer,
bytes written into ``grad_data`` or into optimizer state the strategy restores later.
Where it hangs says nothing; what it holds does.

Before each parameter offload, :func:`take_anchors` reads words (8 bytes) of every DDP
buffer's ``param_data`` on an even grid, ``spacing`` bytes apart (about 65,536 in all, at
most 2**20 on large devices); words that tell nothing (four equal elements, a value seen
twice) are left out. After the offload, :func:`find` looks for them in every device
allocation but the parameters' own storages and the model parts' (frozen parameters,
the reference model: theirs by storage, judged by their own rule):

- in CPU emulation: every storage of the emulated device's registry, its own allocation
  table, which nothing on the emulated device is outside of;
- on CUDA: every active block of PyTorch's caching allocator
  (``torch.cuda.memory_snapshot``), read through a storage over its address, so a block
  no Python object references is read too. Only the default pool's segments are read:
  a ``MemPool``'s allocator may hand out addresses that are not mapped (a paused
  torch_memory_saver region). Memory in other pools and outside PyTorch's allocator is
  the device ledger's, by totals.

Search. Each allocation is sampled every ``stride`` bytes (8 more than a multiple of
``spacing``, from a random start; an allocation under 64 strides at every word), eight
windows of 8 bytes in a row at each sample, every byte alignment, so over ``spacing / 8``
samples every residue of the grid is met: a copy at any offset and byte alignment meets
an anchor about every ``stride * spacing / 8`` bytes (2 KiB at a 4 MiB payload). On the
host a bit table of the anchors' hashes passes the few windows worth looking up. A window
equal to an anchor gives an offset (where the buffer's byte 0 would be in that
allocation); the offsets most samples met (64 per allocation) are verified against every
anchor of their buffer: the anchors matched there, over the anchors kept, times the
buffer's bytes, is the bytes of the buffer found there. An allocation with more than 16
offsets holds a copy in pieces, some of which no sample met: there the samples measure it,
each standing for the bytes a sample meets an anchor in (the verified bytes its floor).
Before each offload the search finds every buffer where it is, or the run
stops (:class:`BlindSearch`).

Limits: a copy that is not the same bytes (converted to another dtype, interleaved with
other bytes every few elements, XORed) is not found by content: the device ledger's
totals still count it as memory no part owns, and a release it took from another part is
no release of the parameters (``core.verdicts``). Code that reads offloadprobe's own
internals can find the anchors, as it could replace the check.

Cost: about 30 ms per 50 MiB of device memory on a loaded host core, and about 3.5 MiB of
host memory for the anchors, held from the first offload on (so inside every host
figure's baseline); on CUDA a few kernels over the allocator's blocks.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from offloadprobe.engine.model.anchor_words import aligned_words, constant, informative
from offloadprobe.engine.model.device_regions import Region, storage_range, words_of
from offloadprobe.engine.runtime.emulation import real_device

ANCHORS = 1 << 16
"""Anchors at a payload whose device memory is up to ``ANCHORS * 2**14`` bytes (1 GiB)."""
MAX_ANCHORS = 1 << 20
MEETINGS = 512
"""Samples that meet an anchor in one whole copy of the parameters: ``stride`` is
``8 * anchors / MEETINGS`` bytes, so a copy of a 256th of them meets about 8."""
MIN_MATCHES = 4
"""Anchors an offset must match to count: one match may be chance."""
MAX_OFFSETS = 64
"""Offsets verified per allocation (the ones most samples met)."""
PIECES = 16
"""More offsets than this in one allocation: a copy in pieces, measured by its samples."""
FULL_SCAN_WORDS = 64
"""An allocation under this many strides is read at every word."""


@dataclass(frozen=True, slots=True)
class Anchors:
    """Words of the parameters' bytes, taken before an offload (host tensors)."""

    spacing: int
    """Bytes between two anchors of a buffer (a multiple of 8)."""
    positions: torch.Tensor
    """Byte offset of each anchor in its buffer (int64), buffer by buffer."""
    values: torch.Tensor
    """The word at each position (int64)."""
    starts: tuple[int, ...]
    """Where each buffer's anchors start in ``positions`` (and one past the last)."""
    sorted_values: torch.Tensor
    sorted_positions: torch.Tensor
    sorted_buffer: torch.Tensor
    """``values`` sorted, with each one's position and buffer index."""
    sizes: tuple[int, ...]
    """Bytes per buffer."""
    table: torch.Tensor | None = None
    """Host searches: a bit per hash of a word, set for every anchor (``_hashed``): a
    window whose bit is clear is no anchor, and few windows are left to look up."""

    def kept(self, buffer: int) -> int:
        """Anchors kept of one buffer."""
        return self.starts[buffer + 1] - self.starts[buffer]

    def of(self, buffer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(positions, values)`` of one buffer's anchors."""
        a, b = self.starts[buffer], self.starts[buffer + 1]
        return self.positions[a:b], self.values[a:b]

    def stride(self) -> int:
        """Bytes between two samples of an allocation: 8 more than a multiple of
        ``spacing`` (see the module), about ``8 * grid / MEETINGS``."""
        grid = -(-sum(self.sizes) // self.spacing)
        target = max(64, 8 * grid // MEETINGS)
        return self.spacing * max(1, target // self.spacing) + 8

    def to(self, device: torch.device) -> Anchors:
        """The same anchors with their tensors on ``device``."""
        if device.type == "cpu":
            return self
        return Anchors(
            spacing=self.spacing,
            positions=self.positions.to(device),
            values=self.values.to(device),
            starts=self.starts,
            sorted_values=self.sorted_values.to(device),
            sorted_positions=self.sorted_positions.to(device),
            sorted_buffer=self.sorted_buffer.to(device),
            sizes=self.sizes,
        )


HASH = -7046029254386353131
"""splitmix64's increment (0x9E3779B97F4A7C15) as int64: an odd multiplier for ``_hashed``."""


def _hashed(words: torch.Tensor, bits: int) -> torch.Tensor:
    """The top ``bits`` bits of ``words * HASH`` (mod 2**64), as int64."""
    return ((words * HASH) >> (64 - bits)) & ((1 << bits) - 1)


def _table(values: torch.Tensor) -> torch.Tensor:
    """A table of ``values``' hashes, 16 slots per value (1 MiB for 65,536): a window
    whose slot is clear is no anchor, and one in 16 others is left to look up."""
    bits = max(16, (max(1, values.numel()) - 1).bit_length() + 4)
    table = torch.zeros(1 << bits, dtype=torch.bool)
    table[_hashed(values, bits)] = True
    return table


def _maybe(table: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Positions in ``window`` whose slot is set (every anchor's is; few others)."""
    bits = table.numel().bit_length() - 1
    slots = table.index_select(0, _hashed(window, bits))  # not table[...]: 100 times slower
    return torch.nonzero(slots).reshape(-1)


def anchor_count(device_bytes: int, words: int) -> int:
    """Anchors taken of ``words`` 8-byte words on a device of ``device_bytes``."""
    wanted = min(MAX_ANCHORS, max(ANCHORS, device_bytes >> 14))
    return max(1, min(words, wanted))


@contextlib.contextmanager
def _serial() -> Iterator[None]:
    """One intra-op thread meanwhile: the host work here is many small operations, which
    torch's thread pool only slows (ten times, on a loaded 2-core host), and none of it is
    the measured code's."""
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads > 1:
            torch.set_num_threads(threads)


class BlindSearch(RuntimeError):
    """The search did not find the parameters where they are: it would find no copy."""


def _unchanged(anchors: Anchors, tensors: list[torch.Tensor]) -> bool:
    """Whether every anchor still reads as taken (the same buffers, their bytes there)."""
    with torch._C.DisableTorchFunction():
        aligned = [aligned_words(t) for t in tensors]
        sizes = tuple(n for _, n in aligned)
        if sizes != anchors.sizes:
            return False
        for index, (tensor, (words, _)) in enumerate(zip(tensors, aligned, strict=True)):
            positions, values = anchors.of(index)
            where = (positions // 8).to(real_device(tensor))
            if not torch.equal(words.index_select(0, where).cpu(), values):
                return False
    return True


def take_anchors(
    buffers: Iterable[torch.Tensor],
    device_bytes: int,
    previous: Anchors | None = None,
    limit: int | None = None,
) -> Anchors | None:
    """Anchors of each buffer (``param_data``) as it is now; None where there is nothing
    to look for (no buffer of 8 bytes or more, none but equal words). The first ones of a
    run are checked by finding each buffer where it is (:class:`BlindSearch` where that
    fails: a search that cannot see what it looks for must not pass), which also makes,
    before the first offload, whatever the search's first call in a process allocates.
    ``previous`` anchors whose every word still reads the same are kept (no train step
    changed the buffers). ``limit``: at most this many anchors (a store's room)."""
    tensors = [t for t in buffers if t.numel() * t.element_size() >= 8]
    if not tensors:
        return None
    if previous is not None and _unchanged(previous, tensors):
        return previous
    with _serial():
        anchors = _anchors(tensors, device_bytes, limit)
    if not anchors.values.numel():
        return None
    if previous is not None:  # the search was checked on these buffers before
        return anchors
    with torch._C.DisableTorchFunction():
        regions = [Region(*storage_range(t), real_device(t)) for t in tensors]
    found: dict[int, int] = {}
    for region in regions:  # each alone: a small one batched with others may go unmet
        found.update(find(anchors, [region]))
    for index, (region, size) in enumerate(zip(regions, anchors.sizes, strict=True)):
        # a region's last word is never a window's start (each reads the word after it)
        # a buffer with fewer anchors than a match needs is never found, copied or not
        # (a small shard of many: FSDP2's norms); the others must be found whole
        # (a small one's last anchors are near its end, where a window reads past it)
        kept = anchors.kept(index)
        whole = size * (1 - max(1 / 64, MIN_MATCHES / kept)) - 8 if kept else 0
        if kept >= MIN_MATCHES and found.get(region.address, 0) < whole:
            raise BlindSearch(
                f"the content search found {found.get(region.address, 0)} of the {size} "
                "bytes of a param_data buffer in the buffer itself: it cannot look for copies"
            )
    # the small allocations' path too (read together, then alone): its first call in a
    # process allocates what the search keeps, and that must be before the first offload
    largest = max(regions, key=lambda r: r.nbytes)
    small = min(SMALL, largest.nbytes // 2) - 8
    find(anchors, [Region(largest.address + k * small, small, largest.device) for k in (0, 1)])
    return anchors


def _anchors(tensors: list[torch.Tensor], device_bytes: int, limit: int | None) -> Anchors:
    with torch._C.DisableTorchFunction():
        aligned = [aligned_words(t) for t in tensors]
    sizes = tuple(n for _, n in aligned)
    count = anchor_count(device_bytes, sum(sizes) // 8)
    count = min(count, limit) if limit else count
    spacing = max(8, -(-sum(sizes) // count // 8) * 8)
    positions, values, owners = [], [], []
    with torch._C.DisableTorchFunction():
        for index, (tensor, size) in enumerate(zip(tensors, sizes, strict=True)):
            words = aligned[index][0]
            where = torch.arange(0, size - 7, spacing, dtype=torch.int64)
            picked = words[(where // 8).to(real_device(tensor))].cpu()
            good = informative(picked) & ~constant(words, picked)
            positions.append(where[good])
            values.append(picked[good])
            owners.append(torch.full((int(good.sum()),), index, dtype=torch.int64))
        all_values, all_positions = torch.cat(values), torch.cat(positions)
        all_owners = torch.cat(owners)
        # a value seen twice would say two places: neither is kept
        sorted_values, order = torch.sort(all_values)
        same = sorted_values[1:] == sorted_values[:-1]
        twice = torch.zeros_like(sorted_values, dtype=torch.bool)
        twice[1:] |= same
        twice[:-1] |= same
        single = torch.ones_like(twice).index_put_((order,), ~twice)
        per = [int((all_owners[single] == i).sum()) for i in range(len(tensors))]
        on_host = all(real_device(t).type == "cpu" for t in tensors)
    starts = [0]
    for n in per:
        starts.append(starts[-1] + n)
    return rebuilt(
        spacing=spacing,
        positions=all_positions[single],
        values=all_values[single],
        starts=tuple(starts),
        sizes=sizes,
        table=on_host,
    )


def rebuilt(
    *,
    spacing: int,
    positions: torch.Tensor,
    values: torch.Tensor,
    starts: tuple[int, ...],
    sizes: tuple[int, ...],
    table: bool = True,
) -> Anchors:
    """Anchors from their positions and values, buffer by buffer (``starts``), each value
    seen once: the sorted lookups and, for a host search (``table``), the hash table."""
    with torch._C.DisableTorchFunction():
        sorted_values, order = torch.sort(values)
        owners = torch.repeat_interleave(
            torch.arange(len(sizes), dtype=torch.int64),
            torch.tensor([b - a for a, b in itertools.pairwise(starts)], dtype=torch.int64),
        )
        return Anchors(
            spacing=spacing,
            positions=positions,
            values=values,
            starts=starts,
            sorted_values=sorted_values,
            sorted_positions=positions[order],
            sorted_buffer=owners[order],
            sizes=sizes,
            table=_table(sorted_values) if table else None,
        )


def _overlaps(region: Region, ranges: Iterable[tuple[int, int]]) -> bool:
    end = region.address + region.nbytes
    return any(start < end and region.address < start + size for start, size in ranges if size)


def _shifted(low: torch.Tensor, high: torch.Tensor, shift: int) -> torch.Tensor:
    """The 8 bytes starting ``shift`` bytes into ``low`` (``high`` the word after it)."""
    if shift == 0:
        return low
    bits = 8 * shift
    return ((low >> bits) & ((1 << (64 - bits)) - 1)) | (high << (64 - bits))


CHUNK = 4096
"""Samples (and anchors) handled at once: every temporary of the sampling is this many
words (32 KiB; below torch's parallel grain), whatever the region, so the same blocks
serve every chunk, region and cycle."""


def _offsets(words: torch.Tensor, step: int, start: int, anchors: Anchors) -> list[Any]:
    """Samples every ``step`` words from ``start``, eight windows each: ``(where the
    matched anchor's buffer would start in the region, its buffer, where the window is)``
    of the windows equal to an anchor, chunk by chunk."""
    sorted_values, last = anchors.sorted_values, anchors.sorted_values.numel() - 1
    found = []
    samples = (words.numel() - 2 - start) // step + 1
    for first in range(0, max(0, samples), CHUNK):
        at = start + first * step
        count = min(CHUNK, samples - first)
        # always CHUNK words (zeros past the samples, which no anchor is): every chunk's
        # temporaries are the same sizes, so no chunk leaves the host heap larger
        low = torch.zeros(CHUNK, dtype=torch.int64, device=words.device)
        high = torch.zeros_like(low)
        low[:count] = words[at : at + (count - 1) * step + 1 : step]
        high[:count] = words[at + 1 : at + (count - 1) * step + 2 : step]
        for shift in range(8):
            window = _shifted(low, high, shift)
            maybe = None if anchors.table is None else _maybe(anchors.table, window)
            if maybe is not None:
                window = window[maybe]
            index = torch.searchsorted(sorted_values, window).clamp_(max=last)
            equal = torch.nonzero(sorted_values.index_select(0, index) == window).reshape(-1)
            if equal.numel():
                hit = equal if maybe is None else maybe[equal]
                inside = hit < count
                hit, equal = hit[inside], equal[inside]
            if equal.numel():
                where = (at + hit * step) * 8 + shift
                index = index[equal]
                origin = where - anchors.sorted_positions[index]
                found.append((origin, anchors.sorted_buffer[index], where))
    return found


def _matched(words: torch.Tensor, anchors: Anchors, buffer: int, at: int) -> int:
    """Anchors of ``buffer`` found with its byte 0 at byte ``at`` of the region."""
    positions, values = anchors.of(buffer)
    bounds = torch.tensor([-at, words.numel() * 8 - 16 - at], dtype=torch.int64)
    first, _ = torch.searchsorted(positions, bounds.to(positions.device)).tolist()
    _, end = torch.searchsorted(positions, bounds.to(positions.device), right=True).tolist()
    total = 0
    for a in range(first, end, CHUNK):
        b = min(end, a + CHUNK)
        index = (positions[a:b] + at) // 8
        window = _shifted(words.index_select(0, index), words.index_select(0, index + 1), at % 8)
        total += int((window == values[a:b]).sum())
    return total


def _sampled(words: torch.Tensor, anchors: Anchors, rng: torch.Generator) -> tuple[int, list[Any]]:
    """``(step, _offsets)`` over ``words``: every word where they are few (under
    ``FULL_SCAN_WORDS`` strides), else every stride from a random start."""
    step = anchors.stride() // 8
    if words.numel() <= FULL_SCAN_WORDS * step:
        return 1, _offsets(words, 1, 0, anchors)
    start = int(torch.randint(0, step, (1,), generator=rng).item())
    return step, _offsets(words, step, start, anchors)


def _search(region: Region, anchors: Anchors, rng: torch.Generator) -> int:
    """Bytes of the parameters found in one region."""
    words = words_of(region)
    if words.numel() < 2:
        return 0
    step, found = _sampled(words, anchors, rng)
    if not found:
        return 0
    # each copy run is one (buffer, where its byte 0 would be): the most met first
    keys = torch.stack([torch.cat([f[1] for f in found]), torch.cat([f[0] for f in found])], 1)
    unique, counts = torch.unique(keys, dim=0, return_counts=True)
    order = torch.argsort(counts, descending=True)
    total = 0.0
    for buffer, at in unique[order[:MAX_OFFSETS]].tolist():
        matched = _matched(words, anchors, buffer, at)
        if matched >= MIN_MATCHES:
            total += matched / anchors.kept(buffer) * anchors.sizes[buffer]
    # a copy in many pieces: a piece no sample met was never verified, so the samples
    # count, each standing for the bytes a sample meets an anchor in on average (an
    # estimate of the whole, the verified pieces' exact bytes its floor)
    if unique.shape[0] > PIECES:
        kept = anchors.starts[-1]
        total = max(total, int(counts.sum()) * step * sum(anchors.sizes) / kept)
    return min(region.nbytes, int(total))


SMALL = 256 * 1024
"""Allocations under this many bytes are read together, ``BATCH`` bytes at a time (one
pass over many small ones costs what one over a large one does); one a pass finds
anything in is then searched alone."""
BATCH = 4 * 2**20


def _batches(regions: list[Region]) -> Iterator[list[Region]]:
    batch: list[Region] = []
    size = 0
    for region in regions:
        if batch and (size + region.nbytes > BATCH or region.device != batch[0].device):
            yield batch
            batch, size = [], 0
        batch.append(region)
        size += region.nbytes
    if batch:
        yield batch


def _met(batch: list[Region], anchors: Anchors, rng: torch.Generator) -> list[Region]:
    """The regions of ``batch`` in which a sample met an anchor, read in one pass."""
    parts = [words_of(r) for r in batch]
    words = torch.cat(parts)
    _, found = _sampled(words, anchors, rng)
    if not found:
        return []
    ends = torch.tensor([p.numel() for p in parts], dtype=torch.int64).cumsum(0) * 8
    where = torch.cat([f[2] for f in found]).cpu()
    met = set(torch.searchsorted(ends, where, right=True).tolist())
    return [batch[i] for i in sorted(met) if i < len(batch)]


def find(
    anchors: Anchors, regions: Iterable[Region], exclude: Iterable[tuple[int, int]] = ()
) -> dict[int, int]:
    """``{region address: bytes of the parameters found there}`` for every region that
    overlaps none of ``exclude`` (``(address, bytes)`` of storages as they are now: the
    buffers' own, the parts'; a freed one's address may hold a copy now)."""
    skip = list(exclude)
    rng = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    found: dict[int, int] = {}
    on: dict[torch.device, Anchors] = {}
    wanted = [r for r in regions if r.nbytes >= 16 and not _overlaps(r, skip)]
    small = [r for r in wanted if r.nbytes < SMALL]
    with torch._C.DisableTorchFunction(), torch.no_grad(), _serial():
        for device in {r.device for r in wanted}:
            on[device] = anchors.to(device)
        searched = [r for r in wanted if r.nbytes >= SMALL]
        for batch in _batches(small):
            searched += _met(batch, on[batch[0].device], rng)
        for region in searched:
            nbytes = _search(region, on[region.device], rng)
            if nbytes:
                found[region.address] = found.get(region.address, 0) + nbytes
    return found
