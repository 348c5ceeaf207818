"""The FSDP2 shape presets are the real models' shapes, and the shard arithmetic is
FSDP2's (dim-0 chunks of ceil(rows / shards), the storage padded to the first chunk)."""

from __future__ import annotations

import pytest

from offloadprobe.engines.fsdp2.presets import (
    PRESETS,
    ModelShape,
    block_bytes,
    block_tensors,
    blocks_for,
    preset,
    shard_rows,
    shards_of,
)


def dims(name: str) -> dict[str, tuple[int, ...]]:
    return {t.name.removeprefix("blocks.0."): t.dims for t in block_tensors(PRESETS[name])}


def test_qwen25_7b_block_is_the_real_layer():
    d = dims("qwen2.5-7b")
    assert d["mlp.gate.weight"] == d["mlp.up.weight"] == (18944, 3584)
    assert d["mlp.down.weight"] == (3584, 18944)
    assert d["attn.q.weight"] == d["attn.o.weight"] == (3584, 3584)
    assert d["attn.k.weight"] == d["attn.v.weight"] == (512, 3584)  # 4 kv heads of 128
    assert d["attn.q.bias"] == (3584,) and d["attn.k.bias"] == (512,)
    assert "attn.q_norm.weight" not in d
    # 233,057,792 parameters a layer (Qwen2.5-7B's, biases and norms included)
    assert block_bytes(PRESETS["qwen2.5-7b"]) == 233_057_792 * 4


def test_qwen3_and_llama_blocks():
    q3, ll = dims("qwen3-8b"), dims("llama3.1-8b")
    assert q3["mlp.up.weight"] == (12288, 4096) and q3["attn.k.weight"] == (1024, 4096)
    assert q3["attn.q_norm.weight"] == q3["attn.k_norm.weight"] == (128,)
    assert "attn.q.bias" not in q3
    assert ll["mlp.up.weight"] == (14336, 4096) and ll["attn.v.weight"] == (1024, 4096)
    assert "attn.q_norm.weight" not in ll and "attn.q.bias" not in ll
    assert (PRESETS["qwen3-8b"].vocab, PRESETS["llama3.1-8b"].vocab) == (151936, 128256)


def test_plain_is_powers_of_two():
    for t in block_tensors(PRESETS["plain"]):
        assert all(n & (n - 1) == 0 for n in t.dims), t


def test_payload_counts_the_blocks_of_the_whole_model():
    qwen = PRESETS["qwen2.5-7b"]
    assert blocks_for(qwen, 8 * block_bytes(qwen)) == 8
    assert blocks_for(qwen, 1) == 1  # at least one block
    shape = ModelShape.for_payload("plain", 3 * block_bytes(PRESETS["plain"]), vocab=1001)
    names = [t.name for t in shape.tensors()]
    assert names[0] == "embed.weight" and names[-2:] == ["norm.weight", "head.weight"]
    assert sum(n.startswith("blocks.2.") for n in names) == len(block_tensors(PRESETS["plain"]))
    assert not any(n.startswith("blocks.3.") for n in names)
    with pytest.raises(ValueError):
        blocks_for(qwen, 0)
    with pytest.raises(KeyError, match=r"known: qwen2\.5-7b"):
        preset("qwen9")


def test_uneven_dim0_shards_pad_to_the_first_chunk():
    # Linear(3584, 18943): weight rows 18943 over 8 shards
    assert [shard_rows(18943, 8, r) for r in range(8)] == [(2368, 2368)] * 7 + [(2367, 2368)]
    # more shards than a chunk's worth of rows: the last ranks hold none
    assert [shard_rows(5, 4, r)[0] for r in range(4)] == [2, 2, 1, 0]
    assert shard_rows(18944, 8, 7) == (2368, 2368)


def test_qwen25_is_uneven_at_24_ranks_almost_everywhere():
    shape = ModelShape(block=PRESETS["qwen2.5-7b"], blocks=28, vocab=152064)
    last = shards_of(shape, 24, 23)
    assert len(last) == 339
    assert sum(s.uneven for s in last) == 337  # all but the embedding and the head
    assert not any(s.uneven for s in shards_of(shape, 8, 7))
