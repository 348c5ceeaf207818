"""FSDP2 model shapes from real models' configs, and FSDP2's dim-0 shard arithmetic
(torch-free).

A block is one decoder layer: attention (q, k, v, o projections; Qwen2.5's q/k/v carry a
bias, Qwen3 normalises q and k per head) and a SwiGLU MLP (gate, up, down), each behind
an RMSNorm. The model around the blocks is an embedding, a final RMSNorm and an untied
output head. The shapes are the real models' (their Hugging Face ``config.json``), so the
shard sizes, the padding of uneven shards and the pinned allocator's rounding of each
host copy follow from real tensor sizes. ``plain`` is a small power-of-two shape for CI.

Payload: the fp32 bytes of the blocks' parameters of the WHOLE model (before sharding:
what "a 7B model" means), not per rank and not counting the embedding, final norm and
head, which every model has once whatever its payload (their bytes:
:meth:`ModelShape.parameter_bytes` counts them too). Per rank, each tensor holds its dim-0
chunk (:func:`shard_rows`), padded to the first chunk's size in the storage FSDP2 keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FP32 = 4


@dataclass(frozen=True, slots=True)
class BlockShape:
    """One real model's decoder-layer shape (names as in its ``config.json``)."""

    name: str
    hidden: int
    """``hidden_size``."""
    intermediate: int
    """``intermediate_size`` (the MLP's gate/up width)."""
    heads: int
    """``num_attention_heads``."""
    kv_heads: int
    """``num_key_value_heads`` (grouped-query attention)."""
    head_dim: int
    """``head_dim`` (``hidden_size / num_attention_heads`` where the config has none)."""
    vocab: int
    """``vocab_size``: the embedding's and the head's rows."""
    qkv_bias: bool = False
    """q, k and v projections carry a bias (Qwen2.5)."""
    qk_norm: bool = False
    """RMSNorm of q and k over ``head_dim`` (Qwen3)."""
    source: str = ""
    """Where the figures come from."""


PRESETS: dict[str, BlockShape] = {
    shape.name: shape
    for shape in (
        BlockShape(
            name="qwen2.5-7b",
            hidden=3584,
            intermediate=18944,
            heads=28,
            kv_heads=4,
            head_dim=128,
            vocab=152064,
            qkv_bias=True,
            source="Qwen/Qwen2.5-7B config.json (28 layers, untied head)",
        ),
        BlockShape(
            name="qwen3-8b",
            hidden=4096,
            intermediate=12288,
            heads=32,
            kv_heads=8,
            head_dim=128,
            vocab=151936,
            qk_norm=True,
            source="Qwen/Qwen3-8B config.json (36 layers, untied head)",
        ),
        BlockShape(
            name="llama3.1-8b",
            hidden=4096,
            intermediate=14336,
            heads=32,
            kv_heads=8,
            head_dim=128,
            vocab=128256,
            source="meta-llama/Llama-3.1-8B config.json (32 layers, untied head)",
        ),
        BlockShape(
            name="plain",
            hidden=256,
            intermediate=1024,
            heads=4,
            kv_heads=2,
            head_dim=64,
            vocab=1024,
            source="powers of two, for CI",
        ),
    )
}


def preset(name: str) -> BlockShape:
    """The preset called ``name``; ``KeyError`` naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(PRESETS)
        raise KeyError(f"no FSDP2 shape preset {name!r}; known: {known}") from None


@dataclass(frozen=True, slots=True)
class TensorShape:
    """One parameter: its name in the model (``blocks.3.mlp.up.weight``) and its dims."""

    name: str
    dims: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.dims)


def block_tensors(shape: BlockShape, index: int = 0) -> tuple[TensorShape, ...]:
    """The parameters of block ``index``, named as :mod:`.model` names them, in order."""
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    p = f"blocks.{index}."
    out = [TensorShape(p + "attn_norm.weight", (h,))]
    for proj, rows in (("q", q), ("k", kv), ("v", kv)):
        out.append(TensorShape(f"{p}attn.{proj}.weight", (rows, h)))
        if shape.qkv_bias:
            out.append(TensorShape(f"{p}attn.{proj}.bias", (rows,)))
    if shape.qk_norm:
        out.append(TensorShape(p + "attn.q_norm.weight", (shape.head_dim,)))
        out.append(TensorShape(p + "attn.k_norm.weight", (shape.head_dim,)))
    out += [
        TensorShape(p + "attn.o.weight", (h, q)),
        TensorShape(p + "mlp_norm.weight", (h,)),
        TensorShape(p + "mlp.gate.weight", (shape.intermediate, h)),
        TensorShape(p + "mlp.up.weight", (shape.intermediate, h)),
        TensorShape(p + "mlp.down.weight", (h, shape.intermediate)),
    ]
    return tuple(out)


def block_bytes(shape: BlockShape) -> int:
    """fp32 bytes of one block's parameters, whole (before sharding)."""
    return sum(t.numel for t in block_tensors(shape)) * FP32


def blocks_for(shape: BlockShape, payload: int) -> int:
    """Blocks whose fp32 parameters come nearest ``payload`` bytes, whole model (see the
    module's docstring), at least one."""
    if payload <= 0:
        raise ValueError(f"payload must be a positive number of bytes, not {payload}")
    return max(1, round(payload / block_bytes(shape)))


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A block shape, a number of blocks and the vocabulary the model is built with."""

    block: BlockShape
    blocks: int
    vocab: int

    @classmethod
    def for_payload(cls, name: str, payload: int, vocab: int | None = None) -> ModelShape:
        shape = preset(name)
        return cls(block=shape, blocks=blocks_for(shape, payload), vocab=vocab or shape.vocab)

    def tensors(self) -> tuple[TensorShape, ...]:
        """Every parameter of the model, named and ordered as :mod:`.model` makes them."""
        h = self.block.hidden
        out = [TensorShape("embed.weight", (self.vocab, h))]
        for i in range(self.blocks):
            out += block_tensors(self.block, i)
        out += [TensorShape("norm.weight", (h,)), TensorShape("head.weight", (self.vocab, h))]
        return tuple(out)

    def parameter_bytes(self) -> int:
        """fp32 bytes of every parameter, whole model."""
        return sum(t.numel for t in self.tensors()) * FP32


def shard_rows(rows: int, shards: int, rank: int) -> tuple[int, int]:
    """(rows this rank holds, rows its padded storage holds) of a dim-0 of ``rows``
    sharded over ``shards``, as FSDP2 chunks it (``torch.chunk``: chunks of
    ``ceil(rows / shards)`` rows, the last ones short or empty; every rank's storage is
    padded to the first chunk's rows)."""
    if shards < 1 or not 0 <= rank < shards:
        raise ValueError(f"rank {rank} of {shards} shards")
    chunk = -(-rows // shards)
    held = max(0, min(chunk, rows - chunk * rank))
    return held, chunk


@dataclass(frozen=True, slots=True)
class ShardShape:
    """One parameter's shard on one rank."""

    tensor: TensorShape
    rows: int
    """Dim-0 rows this rank holds (0 for an empty shard)."""
    padded_rows: int
    """Rows of the storage FSDP2 keeps (the first chunk's)."""

    @property
    def numel(self) -> int:
        return self.rows * math.prod(self.tensor.dims[1:])

    @property
    def padded_numel(self) -> int:
        return self.padded_rows * math.prod(self.tensor.dims[1:])

    @property
    def uneven(self) -> bool:
        """Whether this shard's storage is padded (its dim-0 is short of the chunk)."""
        return self.rows != self.padded_rows


def shards_of(shape: ModelShape, shards: int, rank: int) -> tuple[ShardShape, ...]:
    """Every parameter's shard on ``rank`` of ``shards``."""
    out = []
    for tensor in shape.tensors():
        rows, padded = shard_rows(tensor.dims[0], shards, rank)
        out.append(ShardShape(tensor=tensor, rows=rows, padded_rows=padded))
    return tuple(out)
