"""Both offload parts of one rank replayed through one host allocator, by hand.

Sizes in MiB. The parameter part is naive's event list (a pageable ``.cpu()`` temporary,
a pinned copy beside the previous cycle's, then the temporary and the old copy freed);
the optimizer part ``.to("cpu")`` copies made every offload and dropped every load
(legacy, fixed), or buffers made once and kept (complete). Every figure below is worked
out from the pinned cache's rules alone: power-of-two blocks, a freed block kept
resident and handed to the next request of its size class, whichever part freed it.
"""

from __future__ import annotations

import pytest

from offloadprobe.layout.pinned import Alloc, Event, Free, HostKind
from offloadprobe.plan.rank_replay import OptimizerMoves, per_cycle, run_rank

MiB = 2**20


def naive(payloads: list[float], cycles: int, kind: HostKind = "pinned") -> list[list[Event]]:
    def events(n: int) -> list[Event]:
        out: list[Event] = []
        for c in range(n):
            for b, size in enumerate(payloads):
                out += [
                    Alloc(name=f"temp {b}", nbytes=int(size * MiB), kind="pageable"),
                    Alloc(name=f"copy {b} {c}", nbytes=int(size * MiB), kind=kind),
                    Free(name=f"temp {b}"),
                ]
                if c:
                    out.append(Free(name=f"copy {b} {c - 1}"))
        return out

    return per_cycle(events, cycles)


def moves(tensors: list[float], kind: HostKind = "pinned", kept: bool = False) -> OptimizerMoves:
    return OptimizerMoves(tensors=tuple(int(t * MiB) for t in tensors), kind=kind, kept=kept)


def test_cached_optimizer_blocks_stay_under_the_next_parameter_offload() -> None:
    # naive 3 (block 4); optimizer tensors 6 (block 8) and 1.5 (block 2).
    # cycle 0: offload 3 + 4 = 7, then 4; optimizer + 8 + 2 = 14; its load caches both.
    # cycle 1: 14 + temp 3 + a new 4 (no 4 MiB block cached) = 21; then 18, and the
    # optimizer takes its own blocks back.
    run = run_rank(naive([3], 2), moves([6, 1.5]))
    assert run.host_peak == 21 * MiB
    assert (run.params.peak, run.params.steady) == (11 * MiB, 8 * MiB)
    assert (run.optimizer.peak, run.optimizer.steady) == (10 * MiB, 10 * MiB)
    # the peaks add: 11 + 10, not max(11, 8 + 10) = 18
    assert run.host_peak == run.params.peak + run.optimizer.peak
    assert run.cross_reuses == 0
    assert [(p.phase, p.before // MiB, p.peak // MiB, p.after // MiB) for p in run.phases[4:6]] == [
        ("offload", 14, 21, 18),
        ("offload optimizer", 18, 18, 18),
    ]


def test_a_parameter_copy_takes_a_cached_optimizer_block_of_its_size_class() -> None:
    # two buffers (vpp chunks) 3 (block 4) and 1.5 (block 2); optimizer 6 (8) and 1.5 (2).
    # cycle 0: 3, 7, 4, 5.5, 7.5, 6; optimizer to 16, cached by its load.
    # cycle 1: buffer 0: 19, 23 (new 4), 20, old 4 cached; buffer 1: 21.5, its 2 MiB
    # request takes the optimizer's cached 2 MiB block (no growth), 20, its old block
    # cached; the optimizer's 2 MiB request then takes that one: 20.
    run = run_rank(naive([3, 1.5], 2), moves([6, 1.5]))
    assert run.host_peak == 23 * MiB
    assert run.cross_reuses == 2
    assert (run.params.peak, run.params.steady) == (13 * MiB, 10 * MiB)
    assert (run.optimizer.peak, run.optimizer.steady) == (10 * MiB, 10 * MiB)
    # alone, the parameter part would peak at 13.5 (6 + 3 + 4, then + 1.5 + 2 with the
    # old 2 MiB copy still live) and hold 12
    alone = run_rank(naive([3, 1.5], 2))
    assert (alone.params.peak, alone.params.steady) == (int(13.5 * MiB), 12 * MiB)


def test_ordinary_memory_leaves_with_the_load_and_the_larger_part_wins() -> None:
    # CPU emulation: everything pageable, freed copies leave the process.
    # cycle 0: 3, 6, 3; optimizer 3 + 6 + 1.5 = 10.5, load back to 3.
    # cycle 1: 6, 9, then 3; optimizer 10.5 again. Peak max(9, 3 + 7.5) = 10.5.
    run = run_rank(naive([3], 2, kind="pageable"), moves([6, 1.5], kind="pageable"))
    assert run.host_peak == int(10.5 * MiB)
    # naive's own peak (old copy, temporary, new copy: 9) passes before the optimizer
    # state comes, and the optimizer's copies are gone before the next offload
    assert (run.params.peak, run.params.steady) == (9 * MiB, 3 * MiB)
    assert run.optimizer.peak == int(7.5 * MiB)
    assert run.host_peak == max(run.params.peak, run.params.steady + run.optimizer.peak)


def test_kept_buffers_are_made_once() -> None:
    # lazy-like: one pinned copy of 3 (block 4) made on the first offload and kept;
    # complete: 6 registered, made once and kept: 4 + 6 = 10, every cycle.
    lazy = [[Alloc(name="copy", nbytes=3 * MiB)], [], []]
    run = run_rank(lazy, moves([6], kind="registered", kept=True))
    assert run.host_peak == 10 * MiB
    assert [p.after // MiB for p in run.phases] == [4] + [10] * 11
    assert run.host_allocs == 1  # the registered buffer is not a pinned-cache allocation


def test_events_are_split_into_cycles_by_what_each_cycle_adds() -> None:
    cycles = naive([1], 3)
    assert [len(c) for c in cycles] == [3, 4, 4]
    with pytest.raises(ValueError, match="extend"):
        per_cycle(lambda n: [Alloc(name=f"only {n}", nbytes=MiB)], 2)
