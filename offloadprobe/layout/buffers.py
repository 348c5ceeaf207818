"""One megatron-core ``_ParamAndGradBuffer``: padding rules, bucket layout, optimizer shards.

megatron-core 0.16.1 ``distributed/param_and_grad_buffer.py`` (0.19.2 moved the same
rules into ``optimizer/param_layout.py``), ``use_distributed_optimizer=True``: params are
laid out in reverse ``named_parameters()`` order, each starting on a 64-element boundary;
a bucket closes once it holds ``bucket_size`` elements, and around a ``shared_embedding``
param; each bucket end is padded to ``lcm(dp, 128)`` (``lcm(dp, 128, 2**16)`` with
``pad_buckets_for_high_nccl_busbw``). DDP turns bucketing off when ``overlap_grad_reduce``
is off and on every pipeline stage but the first; a ``bucket_size`` left at None with
overlap on becomes ``max(40_000_000, 1_000_000 * dp)``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from offloadprobe.layout.inputs import DTYPE_BYTES, DdpOptions
from offloadprobe.layout.parameters import ParamEntry

PARAM_ALIGN = 64
"""Param start alignment in elements (megatron: 128 bytes of >= 16-bit values)."""
BUCKET_ALIGN = 128
"""Bucket end alignment in elements, combined with the data-parallel size by lcm."""
BUSBW_ALIGN = 2**16
"""Extra bucket alignment with ``pad_buckets_for_high_nccl_busbw``."""


BufferKind = Literal["dense", "expert"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BufferLayout:
    """One ``_ParamAndGradBuffer`` on one rank."""

    kind: BufferKind
    param_dtype: str
    grad_dtype: str
    numel: int
    """Elements including padding: ``param_data.numel()`` and ``grad_data.numel()``."""
    numel_unpadded: int
    """Sum of bucket contents before bucket-end padding (megatron ``numel_unpadded``)."""
    dp_size: int
    """Size of the group the distributed optimizer shards this buffer over."""
    buckets: tuple[tuple[int, int], ...]
    """``(start, end)`` element offsets of each bucket."""
    param_ranges: tuple[tuple[int, int], ...]
    """``(start, end)`` of each parameter, in buffer order."""

    @property
    def param_bytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.param_dtype]

    @property
    def grad_bytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.grad_dtype]

    def shard_numel(self, dp_rank: int) -> int:
        """Parameter elements the distributed optimizer gives ``dp_rank`` (padding excluded)."""
        starts = [s for s, _ in self.param_ranges]
        covered = [0, *accumulate(e - s for s, e in self.param_ranges)]

        def before(x: int) -> int:  # parameter elements in [0, x)
            i = bisect_right(starts, x)
            if i == 0:
                return 0
            s, e = self.param_ranges[i - 1]
            return covered[i - 1] + min(x, e) - s

        total = 0
        for start, end in self.buckets:
            size = (end - start) // self.dp_size
            lo = start + dp_rank * size
            total += before(lo + size) - before(lo)
        return total

    def shard_pieces(self, dp_rank: int) -> tuple[int, ...]:
        """Per parameter, its elements inside ``dp_rank``'s shard (nonzero pieces only).

        The distributed optimizer keeps one state tensor per such piece, so these are the
        sizes of the rank's per-parameter optimizer tensors (each one an allocation).
        """
        starts = [s for s, _ in self.param_ranges]
        pieces = []
        for start, end in self.buckets:
            size = (end - start) // self.dp_size
            lo, hi = start + dp_rank * size, start + (dp_rank + 1) * size
            i = max(0, bisect_right(starts, lo) - 1)
            while i < len(self.param_ranges) and self.param_ranges[i][0] < hi:
                s, e = self.param_ranges[i]
                if min(e, hi) > max(s, lo):
                    pieces.append(min(e, hi) - max(s, lo))
                i += 1
        return tuple(pieces)

    def max_shard_numel(self) -> int:
        """The largest optimizer shard over the data-parallel ranks."""
        return max(self.shard_numel(r) for r in range(self.dp_size))


def pad_to(value: int, divisor: int) -> int:
    """Round ``value`` up to a multiple of ``divisor``."""
    return -(-value // divisor) * divisor


def pad_param_start(index: int) -> int:
    return pad_to(index, PARAM_ALIGN)


def bucket_end_divisor(dp_size: int, high_nccl_busbw: bool = False) -> int:
    if high_nccl_busbw:
        return math.lcm(dp_size, BUCKET_ALIGN, BUSBW_ALIGN)
    return math.lcm(dp_size, BUCKET_ALIGN)


def pad_bucket_end(index: int, dp_size: int, high_nccl_busbw: bool = False) -> int:
    return pad_to(index, bucket_end_divisor(dp_size, high_nccl_busbw))


def effective_bucket_size(ddp: DdpOptions, dp_size: int, pp_rank: int) -> int | None:
    """The bucket size megatron's DDP uses on ``pp_rank`` (None: one bucket)."""
    if not ddp.overlap_grad_reduce or pp_rank > 0:
        return None
    if ddp.bucket_size is None:
        return max(40_000_000, 1_000_000 * dp_size)
    return ddp.bucket_size


def lay_out_buffer(
    params: Sequence[ParamEntry],
    *,
    kind: BufferKind,
    dp_size: int,
    bucket_size: int | None,
    ddp: DdpOptions,
) -> BufferLayout:
    """Place ``params`` (in ``named_parameters()`` order) the way megatron-core does."""
    busbw = ddp.pad_buckets_for_high_nccl_busbw
    buckets: list[tuple[int, int]] = []
    ranges: list[tuple[int, int]] = []
    unpadded = 0
    bucket_start = cursor = end = 0
    open_bucket = False

    def close(at: int) -> int:
        nonlocal unpadded, open_bucket
        unpadded += at - bucket_start
        bucket_end = pad_bucket_end(at, dp_size, busbw)
        buckets.append((bucket_start, bucket_end))
        open_bucket = False
        return bucket_end

    for param in reversed(params):
        cursor = pad_param_start(cursor)
        if param.shared_embedding and open_bucket:
            cursor = bucket_start = close(cursor)
        end = cursor + param.numel
        ranges.append((cursor, end))
        open_bucket = True
        full = bucket_size is not None and end - bucket_start >= bucket_size
        if full or param.shared_embedding:
            cursor = bucket_start = close(end)
        else:
            cursor = end
    if open_bucket:
        close(end)
    return BufferLayout(
        kind=kind,
        param_dtype=ddp.param_dtype,
        grad_dtype=ddp.grad_dtype,
        numel=buckets[-1][1] if buckets else 0,
        numel_unpadded=unpadded,
        dp_size=dp_size,
        buckets=tuple(buckets),
        param_ranges=tuple(ranges),
    )
