"""Pinned-allocator accounting: exact numbers from pure functions.

The offload patterns replayed here mirror ``offloadprobe.engine.strategies`` (naive: a fresh
``.cpu().pin_memory()`` per offload; lazy: one pinned buffer, ``copy_`` into it).
"""

from __future__ import annotations

import pytest

from offloadprobe.layout.pinned import (
    PAGE_SIZE,
    Alloc,
    EmptyCache,
    Free,
    HostAllocatorConfig,
    free_list_index,
    page_rounded,
    pinned_block_size,
    power_of_two_ceil,
    replay,
    resident_bytes,
)

MiB, GiB = 2**20, 2**30


def naive_cycles(payloads: list[int], cycles: int) -> list[Alloc | Free]:
    """``copy = buf.cpu().pin_memory()`` per buffer and cycle; the old copy goes last."""
    events: list[Alloc | Free] = []
    for c in range(cycles):
        for b, n in enumerate(payloads):
            events += [
                Alloc(name=f"tmp{b}", nbytes=n, kind="pageable"),
                Alloc(name=f"copy{b}.{c}", nbytes=n),
                Free(name=f"tmp{b}"),
            ]
            if c:
                events.append(Free(name=f"copy{b}.{c - 1}"))
    return events


def test_power_of_two_rounding() -> None:
    assert [power_of_two_ceil(n) for n in (0, 1, 2, 3, 4097)] == [0, 1, 2, 4, 8192]
    assert pinned_block_size(5 * GiB) == 8 * GiB  # measured on H200 (torch 2.11)
    assert pinned_block_size(8 * GiB) == 8 * GiB
    assert pinned_block_size(2_080_000_000) == 2**31  # vllm #53042: 2.08 GiB -> 4 GiB class
    assert pinned_block_size(int(129.5 * MiB)) == 256 * MiB  # pytorch #150517


def test_threshold_disables_rounding_above_it() -> None:
    config = HostAllocatorConfig(max_round_threshold=1 * GiB)
    assert pinned_block_size(5 * GiB, config) == 5 * GiB
    assert pinned_block_size(700 * MiB, config) == 1 * GiB
    capped = HostAllocatorConfig(max_cached_size=1 * GiB)  # cache cap also stops rounding
    assert pinned_block_size(5 * GiB, capped) == 5 * GiB


def test_free_list_index_and_pages() -> None:
    assert [free_list_index(n) for n in (1, 2, 3, 4, 5 * GiB, 8 * GiB)] == [0, 1, 2, 2, 33, 33]
    assert page_rounded(1) == PAGE_SIZE
    assert page_rounded(5 * GiB + 1) == 5 * GiB + PAGE_SIZE
    assert resident_bytes(5 * GiB, "registered") == 5 * GiB  # cudaHostRegister: exact pages
    assert resident_bytes(5 * GiB, "pinned") == 8 * GiB


def test_naive_replay_matches_h200_measurement() -> None:
    # H200 table (reference/h200-measured): 5 GiB payload, RSS deltas over the base
    result = replay(naive_cycles([5 * GiB], cycles=3))
    assert result.steps[2].resident == 8 * GiB  # after cycle 0: one 8 GiB pinned block
    assert result.peak_between(0, 3) == 13 * GiB  # cycle 0: 5 pageable + 8 pinned (2.6x)
    assert result.peak == 21 * GiB  # cycle 1: 8 held + 5 pageable + 8 new (HWM 23.61 - 2.61)
    assert result.final == 16 * GiB  # two cached 8 GiB blocks stay resident (18.61 - 2.61)
    assert result.host_allocs == 2  # cycle 2 reuses the block freed in cycle 1
    assert [
        s.reused for s in result.steps if isinstance(s.event, Alloc) and s.event.kind == "pinned"
    ] == [False, False, True]


@pytest.mark.parametrize(
    ("kind", "held"), [("pinned", 8 * GiB), ("registered", 5 * GiB), ("pageable", 5 * GiB)]
)
def test_allocate_once_strategies(kind: str, held: int) -> None:
    result = replay([Alloc(name="copy", nbytes=5 * GiB, kind=kind)])  # lazy / registered / ...
    assert result.peak == result.final == held


def test_freed_blocks_stay_cached_until_empty_cache() -> None:
    result = replay([Alloc(name="a", nbytes=3 * MiB), Free(name="a"), EmptyCache()])
    assert [s.resident for s in result.steps] == [4 * MiB, 4 * MiB, 0]
    assert [s.pinned_cached for s in result.steps] == [0, 4 * MiB, 0]


def test_blocks_are_never_split_or_merged() -> None:
    result = replay(
        [Alloc(name="a", nbytes=8 * MiB), Free(name="a"), Alloc(name="b", nbytes=3 * MiB)]
    )  # 4 MiB class: the 8 MiB block stays
    assert result.final == 12 * MiB
    assert result.host_allocs == 2


def test_same_rounded_size_is_reused_across_buffers() -> None:
    # two buffers in the same power-of-two class share cached blocks under naive
    result = replay(naive_cycles([5 * GiB, 6 * GiB], cycles=2))
    assert result.host_allocs == 3  # cycle 1, buffer 1 reuses buffer 0's freed block
    assert result.final == 3 * 8 * GiB


def test_max_cached_size_releases_big_blocks() -> None:
    config = HostAllocatorConfig(max_cached_size=1 * GiB)
    result = replay([Alloc(name="a", nbytes=5 * GiB), Free(name="a")], config)
    assert [s.resident for s in result.steps] == [5 * GiB, 0]


def test_unrounded_reuse_can_hand_out_a_smaller_block() -> None:
    # above the round threshold sizes are exact but free lists stay keyed by ceil(log2)
    config = HostAllocatorConfig(max_round_threshold=1 * GiB)
    result = replay(
        [Alloc(name="a", nbytes=5 * GiB), Free(name="a"), Alloc(name="b", nbytes=7 * GiB)], config
    )
    assert result.undersized_reuses == 1
    assert result.final == 5 * GiB


def test_replay_rejects_inconsistent_events() -> None:
    with pytest.raises(ValueError, match="freed but not allocated"):
        replay([Free(name="x")])
    with pytest.raises(ValueError, match="twice"):
        replay([Alloc(name="x", nbytes=1), Alloc(name="x", nbytes=1)])
