"""The probe at a parallel layout: each rank's param_data bytes, by hand.

A tiny probe (h = 64, 4 heads, vocabulary 256, 16 positions, 2 layers; MoE: 4 experts)
laid out by megatron-core's rules, each figure derived below from the parameter list:
params start on 64-element boundaries, laid out in reverse order; one bucket per buffer
(no grad-reduce overlap), its end padded to lcm(dp, 128). The benchmark
``benchmarks/ranks_projection_validation.py`` checks the same projection against real
ranks (``payload_bytes`` equal for every rank of every layout).
"""

from __future__ import annotations

import pytest

from offloadprobe.core.config import ModelConfig
from offloadprobe.layout.inputs import LayoutError
from offloadprobe.plan.probe_world import ProbeLayout, probe_rank_stages

MiB = 2**20

DENSE = ModelConfig(
    num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=16
)
MOE = ModelConfig(
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    vocab_size=256,
    seq_length=16,
    num_experts=4,
)

# elements, each padded to a multiple of 64 where another param follows it
EMBEDDINGS = 256 * 64 + 16 * 64  # word + learned positions (first stage)
HEAD = 64 + 64 + 256 * 64  # final LayerNorm + untied output layer (last stage)
ATTENTION = 128 + (4096 + 64) + (12288 + 192) + 128  # norms, proj, qkv (w + b)
DENSE_MLP = (16384 + 256) + (16384 + 64)  # fc1 4h x h + bias, fc2 h x 4h + bias
ROUTER = 256 + 64  # 4 x 64 weight, 4-element bias padded to 64
EXPERT = DENSE_MLP  # as wide as the dense MLP


def _buffers(model: ModelConfig, layout: ProbeLayout) -> list[list[tuple[str, int]]]:
    return [[(b.kind, b.param_bytes) for b in s.buffers] for s in probe_rank_stages(model, layout)]


def test_moe_ep2_splits_experts_into_their_own_buffer() -> None:
    # 2 ranks, ep 2, dp 2: each holds 2 of the 4 experts per layer in the expert buffer
    dense = EMBEDDINGS + 2 * (ATTENTION + ROUTER) + HEAD  # 68352 = 534 x 128
    expert = 2 * 2 * EXPERT  # 132352 = 1034 x 128
    expected = [[("dense", 2 * dense), ("expert", 2 * expert)]]
    assert _buffers(MOE, ProbeLayout(ep=2, dp=2)) == expected


def test_moe_tp2_keeps_experts_whole_and_buffers_them_by_version() -> None:
    # MoE with linear biases needs expert tp 1: tp 2 splits attention and the vocabulary,
    # every rank holds all 4 experts whole
    attention = 128 + (2048 + 64) + (6144 + 128) + 128  # qkv bias 96 padded to 128
    dense = 128 * 64 + 16 * 64 + 2 * (attention + ROUTER) + 128 + 128 * 64
    experts = 2 * 4 * EXPERT
    assert (dense, experts) == (35456, 264704)  # both multiples of 128
    # megatron-core 0.19.2: expert tp 1 != tp 2 puts experts in their own buffer
    split = [[("dense", 2 * dense), ("expert", 2 * experts)]]
    assert _buffers(MOE, ProbeLayout(tp=2)) == split
    # 0.16.1: only ep > 1 does; with ep 1 they stay in the dense buffer
    assert _buffers(MOE, ProbeLayout(tp=2, megatron_core="0.16.1")) == [
        [("dense", 2 * (dense + experts))]
    ]
    # tp 2 ep 2 on two ranks: 2 experts per rank, one expert-data-parallel rank
    assert _buffers(MOE, ProbeLayout(tp=2, ep=2)) == [[("dense", 2 * dense), ("expert", experts)]]


def test_pp2_and_vpp2_stages() -> None:
    layer = ATTENTION + DENSE_MLP  # 49984: 390.5 x 128, so a lone layer pads to 50048
    first, last = EMBEDDINGS + layer + 64, layer + HEAD + 64  # bucket ends on 128
    assert (first, last) == (67456, 66560)
    assert _buffers(DENSE, ProbeLayout(pp=2)) == [[("dense", 2 * first)], [("dense", 2 * last)]]
    deep = ModelConfig(
        num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=16
    )
    # chunk k of pipeline rank r is stage k * pp + r of four: rank 0 holds stages 0 and 2
    assert _buffers(deep, ProbeLayout(pp=2, vpp=2)) == [
        [("dense", 2 * first), ("dense", 2 * (layer + 64))],
        [("dense", 2 * (layer + 64)), ("dense", 2 * last)],
    ]


def test_ranks_map_to_stages_pp_outermost() -> None:
    layout = ProbeLayout(tp=2, pp=2)
    assert [layout.pp_rank(r) for r in range(4)] == [0, 0, 1, 1]
    assert [ProbeLayout(pp=2, dp=2).pp_rank(r) for r in range(4)] == [0, 0, 1, 1]


def test_an_impossible_expert_layout_names_the_field() -> None:
    # ep 2 needs tp * dp / ep whole: one rank of tp 1 cannot hold half the experts' replicas
    with pytest.raises(LayoutError, match="ep"):
        probe_rank_stages(MOE, ProbeLayout(ep=2))
