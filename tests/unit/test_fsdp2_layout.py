"""FSDP2's per-rank layout and verl FSDP2's pinned bytes: exact on hand-worked cases, and
within 2% of the figures measured on the H200 (or computed there from the real shapes:
``shared/reference/fsdp2-measured-2026-12-03.md``). The shapes are the models' own
configs (hidden, intermediate, heads, KV heads, head dim, vocabulary, layers); a private
table here, reconciled with the engine's presets by the lead."""

from __future__ import annotations

import pytest

from offloadprobe.engines.fsdp2.layout import (
    Tensor,
    chunk_rows,
    local_rows,
    rank_layout,
    shard,
)

MIB, GIB = 2**20, 2**30


def decoder(h, inter, layers, heads, kv, hd, vocab, qkv_bias=False, qk_norm=False):
    """One unit per decoder layer (verl's fully_shard per layer), then the root's rest."""
    units = []
    for i in range(layers):
        p = f"layers.{i}."
        unit = [
            Tensor(name=p + n, shape=s)
            for n, s in (("q", (heads * hd, h)), ("k", (kv * hd, h)), ("v", (kv * hd, h)))
        ]
        if qkv_bias:
            unit += [
                Tensor(name=p + n, shape=(d,))
                for n, d in (("q.b", heads * hd), ("k.b", kv * hd), ("v.b", kv * hd))
            ]
        unit.append(Tensor(name=p + "o", shape=(h, heads * hd)))
        if qk_norm:
            unit += [Tensor(name=p + "q_norm", shape=(hd,)), Tensor(name=p + "k_norm", shape=(hd,))]
        unit += [
            Tensor(name=p + "gate", shape=(inter, h)),
            Tensor(name=p + "up", shape=(inter, h)),
            Tensor(name=p + "down", shape=(h, inter)),
            Tensor(name=p + "ln1", shape=(h,)),
            Tensor(name=p + "ln2", shape=(h,)),
        ]
        units.append(unit)
    units.append(
        [
            Tensor(name="embed", shape=(vocab, h)),
            Tensor(name="norm", shape=(h,)),
            Tensor(name="lm_head", shape=(vocab, h)),
        ]
    )
    return units


MODELS = {  # config.json of each: tie_word_embeddings false in all three
    "qwen2.5-7b": decoder(3584, 18944, 28, 28, 4, 128, 152064, qkv_bias=True),
    "qwen3-8b": decoder(4096, 12288, 36, 32, 8, 128, 151936, qk_norm=True),
    "llama3.1-8b": decoder(4096, 14336, 32, 32, 8, 128, 128256),
}


def linears(out_features: int, in_features: int, n: int = 8):
    return [
        [
            Tensor(name=f"{i}.weight", shape=(out_features, in_features)),
            Tensor(name=f"{i}.bias", shape=(out_features,)),
        ]
        for i in range(n)
    ]


def test_dim0_chunks_and_the_ranks_that_carry_padding() -> None:
    assert chunk_rows(7, 2) == 4 and local_rows(7, 2, 0) == 4 and local_rows(7, 2, 1) == 3
    assert [local_rows(5, 4, r) for r in range(4)] == [2, 2, 1, 0]  # rank 3: padding only
    one = shard(Tensor(name="w", shape=(7, 1024)), 2, 1)
    assert (one.local, one.padded, one.uneven) == (3 * 4096, 4 * 4096, True)
    assert shard(Tensor(name="n", shape=(3584,), itemsize=2), 8, 7).local == 448 * 2


def test_an_uneven_shard_loses_its_block_to_a_moment() -> None:
    """(7, 1024) fp32 on rank 1 of 2: 12 KiB asked three times, 16 KiB blocks. The shard's
    block goes back to the cache at reset_sharded_param (a 16 KiB pageable padded copy
    takes its place); the first moment takes it, the second makes one more."""
    got = rank_layout([[Tensor(name="w", shape=(7, 1024))]], 2, 1)
    assert (got.requested, got.padding_bytes, got.uneven) == (3 * 12288, 4096, 1)
    assert got.pinned_held == 2 * 16384
    assert got.host_peak == 3 * 16384  # two pinned moments + the pageable padded shard
    assert got.exact_host == 16384 + 2 * 12288  # padded storage + moments, exact


def test_an_even_shard_keeps_three_rounded_blocks() -> None:
    got = rank_layout([linears(18944, 3584, n=1)[0][:1]], 8, 0)  # the weight alone
    assert got.requested == 3 * 2368 * 3584 * 4
    assert got.pinned_held == 3 * 64 * MIB and got.padding_bytes == 0


@pytest.mark.parametrize(
    ("shape", "shards", "rank", "held", "peak"),
    [
        ((18944, 3584), 8, 7, 1.98, 1.98),  # Qwen2.5-7B's MLP: 32.4 MiB shards in 64 MiB
        ((18944, 3584), 2, 1, 1.98, 1.98),  # as measured: 129.5 MiB in 256 MiB blocks
        ((8192, 8192), 2, 1, 1.00, 1.00),
        ((18943, 3584), 2, 1, 1.32, 1.65),  # uneven: 0/8 shards pinned, measured 1.32x/1.65x
    ],
)
def test_measured_linear_rows(shape, shards, rank, held, peak) -> None:
    got = rank_layout(linears(*shape), shards, rank)
    assert got.pinned_ratio == pytest.approx(held, rel=0.02)
    assert got.peak_ratio == pytest.approx(peak, rel=0.02)


@pytest.mark.parametrize(
    ("model", "shards", "rank", "held"),
    [
        ("qwen2.5-7b", 8, 7, 1.90),
        ("qwen2.5-7b", 24, 0, 1.53),
        ("qwen3-8b", 8, 7, 1.33),
        ("llama3.1-8b", 8, 7, 1.10),
        ("llama3.1-8b", 24, 0, 1.65),
    ],
)
def test_real_shapes_against_the_reference(model, shards, rank, held) -> None:
    got = rank_layout(MODELS[model], shards, rank, cycles=1)
    assert got.pinned_ratio == pytest.approx(held, rel=0.02)


def test_qwen25_7b_at_8_ranks_in_bytes() -> None:
    """20.2 GiB pinned for 10.6 GiB per rank, every tensor even at 8."""
    got = rank_layout(MODELS["qwen2.5-7b"], 8, 0, cycles=1)
    assert got.tensors == 339 and got.uneven == 0
    assert got.requested / GIB == pytest.approx(10.6, rel=0.02)
    assert got.pinned_held / GIB == pytest.approx(20.2, rel=0.02)


def test_uneven_shards_at_24_ranks_are_on_the_last_rank_only() -> None:
    """337 of the 339 tensors do not divide by 24; only the short last rank re-pads them."""
    last = rank_layout(MODELS["qwen2.5-7b"], 24, 23, cycles=1)
    assert last.uneven == 337 and last.padding_bytes > 0
    assert rank_layout(MODELS["qwen2.5-7b"], 24, 22, cycles=1).uneven == 0
