"""The DDP buffer layout, checked against real megatron-core objects.

``gpt_stage_parameters`` must list what ``GPTModel.named_parameters()`` lists, and
``lay_out_model`` must give what megatron's ``DistributedDataParallel`` allocates
(world size 1 on CPU). Padding for dp > 1 is checked against megatron's own
``_ParamAndGradBuffer`` built with a stand-in process group of that size.
"""

from __future__ import annotations

import types
import unittest.mock as mock
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from offloadprobe.layout.buffers import (
    bucket_end_divisor,
    lay_out_buffer,
    pad_bucket_end,
    pad_param_start,
)
from offloadprobe.layout.inputs import DdpOptions, GptShape, LayoutError, Parallelism, ParamCount
from offloadprobe.layout.optimizer_state import OptimizerOptions, optimizer_state
from offloadprobe.layout.parameters import ParamEntry, gpt_stage_parameters, stage_layer_counts
from offloadprobe.layout.stages import lay_out_model

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

# ------------------------------------------------------------ megatron on CPU (world size 1)
# Self-contained stand-in for the project's runtime emulation: megatron-core allocates its
# DDP buffers on ``torch.cuda.current_device()``; on a CPU-only torch that call is redirected.


@pytest.fixture(scope="module")
def megatron_world() -> Iterator[None]:
    from megatron.core import parallel_state

    owned_group = not torch.distributed.is_initialized()
    owned_state = not parallel_state.model_parallel_is_initialized()
    if owned_group:  # an in-memory store: no TCP port another process could take first
        store = torch.distributed.HashStore()
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    if owned_state:
        parallel_state.initialize_model_parallel(1, 1)
    yield
    if owned_state:
        parallel_state.destroy_model_parallel()
    if owned_group:
        torch.distributed.destroy_process_group()


def _transformer_config(shape: GptShape) -> Any:
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe: dict[str, Any] = {}
    if shape.num_experts:
        moe = dict(
            num_moe_experts=shape.num_experts,
            moe_ffn_hidden_size=shape.moe_ffn_hidden_size,
            moe_router_topk=2,
            moe_layer_freq=[0] * shape.num_dense_layers
            + [1] * (shape.num_layers - shape.num_dense_layers),
        )
        if shape.shared_expert_ffn_hidden_size:
            moe["moe_shared_expert_intermediate_size"] = shape.shared_expert_ffn_hidden_size
    return TransformerConfig(
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_query_groups=shape.num_query_groups,
        kv_channels=shape.kv_channels,
        ffn_hidden_size=shape.ffn_hidden_size or shape.moe_ffn_hidden_size,
        gated_linear_unit=shape.swiglu,
        normalization=shape.normalization,
        qk_layernorm=shape.qk_layernorm,
        add_bias_linear=shape.add_bias_linear,
        add_qkv_bias=shape.add_qkv_bias,
        use_cpu_initialization=True,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        **moe,
    )


def build_megatron(shape: GptShape, ddp: DdpOptions) -> tuple[Any, Any]:
    """A real local-spec GPTModel wrapped in megatron's DDP, on CPU."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.module import Float16Module

    config = _transformer_config(shape)
    spec = get_gpt_decoder_block_spec(
        config, use_transformer_engine=False, normalization=shape.normalization
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=shape.vocab_size,
        max_sequence_length=shape.max_sequence_length or 64,
        position_embedding_type=shape.position_embedding,
        share_embeddings_and_output_weights=not shape.untie_embeddings_and_output_weights,
    )
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=ddp.grad_reduce_in_fp32,
        overlap_grad_reduce=ddp.overlap_grad_reduce,
        bucket_size=ddp.bucket_size,
        use_distributed_optimizer=True,
    )
    with mock.patch("torch.cuda.current_device", lambda: "cpu"):
        # Float16Module casts every param to bf16, as megatron training does before DDP
        wrapped = DistributedDataParallel(
            config=config, ddp_config=ddp_config, module=Float16Module(config, model)
        )
    return model, wrapped


class _Group:
    """Stands in for a process group: megatron's buffer only asks for its size."""

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


def megatron_buffer(numels: list[int], shared: set[int], dp: int, bucket: int | None) -> Any:
    """megatron-core's own ``_ParamAndGradBuffer`` over bf16 params of ``numels``."""
    import megatron.core.distributed.param_and_grad_buffer as pgb
    from megatron.core.distributed import DistributedDataParallelConfig

    params = [torch.nn.Parameter(torch.zeros(n, dtype=torch.bfloat16)) for n in numels]
    for i in shared:
        params[i].shared_embedding = True
    config = DistributedDataParallelConfig(use_distributed_optimizer=True)
    groups = types.SimpleNamespace(tp=_Group(1), dp_cp=_Group(dp))
    with (
        mock.patch("torch.cuda.current_device", lambda: "cpu"),
        mock.patch.object(pgb, "log_on_each_pipeline_stage", lambda *a, **k: None),
    ):
        return pgb._ParamAndGradBuffer(
            config,
            torch.bfloat16,
            torch.float32,
            params,
            _Group(dp),
            bucket,
            {p: str(i) for i, p in enumerate(params)},
            1.0,
            list(range(len(params))),
            False,
            groups,
        )


# ------------------------------------------------------------ shapes

DENSE_LAYERNORM = GptShape(
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    ffn_hidden_size=200,
    vocab_size=1000,
    swiglu=False,
    normalization="LayerNorm",
    add_bias_linear=True,
    untie_embeddings_and_output_weights=False,
    position_embedding="learned_absolute",
    max_sequence_length=40,
)
DENSE_GQA = GptShape(
    num_layers=3,
    hidden_size=96,
    num_attention_heads=6,
    num_query_groups=2,
    kv_channels=24,
    ffn_hidden_size=136,
    vocab_size=777,
    qk_layernorm=True,
    add_qkv_bias=True,
)
MOE_SHARED = GptShape(
    num_layers=3,
    hidden_size=64,
    num_attention_heads=4,
    num_query_groups=2,
    ffn_hidden_size=160,
    vocab_size=512,
    num_experts=4,
    moe_ffn_hidden_size=48,
    num_dense_layers=1,
    shared_expert_ffn_hidden_size=40,
    qk_layernorm=True,
)
MOE_BIAS = GptShape(
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    vocab_size=300,
    num_experts=3,
    moe_ffn_hidden_size=52,
    swiglu=False,
    normalization="LayerNorm",
    add_bias_linear=True,
)
SHAPES = {
    "dense-layernorm": DENSE_LAYERNORM,
    "dense-gqa": DENSE_GQA,
    "moe-shared": MOE_SHARED,
    "moe-bias": MOE_BIAS,
}
DDPS = {
    "one-bucket": DdpOptions(),
    "buckets-5000": DdpOptions(overlap_grad_reduce=True, bucket_size=5000),
    "bf16-grads": DdpOptions(grad_reduce_in_fp32=False),
}


@pytest.mark.parametrize("name", SHAPES)
def test_parameter_list_matches_gptmodel(megatron_world: None, name: str) -> None:
    # GIVEN a shape, WHEN megatron builds it, THEN our list has the same names and sizes
    model, _ = build_megatron(SHAPES[name], DdpOptions())
    real = [(n, p.numel()) for n, p in model.named_parameters()]
    ours = [
        (p.name, p.numel)
        for p in gpt_stage_parameters(SHAPES[name], Parallelism(gpus_per_node=1), 0)
    ]
    assert ours == real


@pytest.mark.parametrize("ddp_name", DDPS)
@pytest.mark.parametrize("name", SHAPES)
def test_buffers_match_megatron_ddp(megatron_world: None, name: str, ddp_name: str) -> None:
    shape, ddp = SHAPES[name], DDPS[ddp_name]
    _, wrapped = build_megatron(shape, ddp)
    stage = lay_out_model(shape, Parallelism(gpus_per_node=1), ddp).stages[0]
    real = [
        (
            b.param_data.numel(),
            b.grad_data.numel(),
            str(b.grad_data.dtype),
            b.numel_unpadded,
            [tuple(i) for i in b.bucket_indices],
        )
        for b in wrapped.buffers
    ]
    ours = [
        (b.numel, b.numel, f"torch.{b.grad_dtype}", b.numel_unpadded, list(b.buckets))
        for b in stage.buffers
    ]
    assert ours == real
    assert wrapped.expert_parallel_buffers == []  # ep = 1: experts stay in the dense buffer
    assert stage.param_bytes == sum(b.param_data.nbytes for b in wrapped.buffers)
    assert stage.grad_bytes == sum(b.grad_data.nbytes for b in wrapped.buffers)


# ------------------------------------------------------------ dp > 1: megatron's buffer itself


@pytest.mark.parametrize("dp", [1, 2, 6, 8, 48, 96])
@pytest.mark.parametrize("bucket", [None, 1500, 5000])
@pytest.mark.parametrize("shared", [set(), {0}, {0, 4}])
def test_padding_matches_megatron_buffer(dp: int, bucket: int | None, shared: set[int]) -> None:
    numels = [100, 1000, 37, 4096, 5, 777, 129]
    real = megatron_buffer(numels, shared, dp, bucket)
    entries = [
        ParamEntry(name=str(i), numel=n, formula=str(n), shared_embedding=i in shared)
        for i, n in enumerate(numels)
    ]
    ours = lay_out_buffer(entries, kind="dense", dp_size=dp, bucket_size=bucket, ddp=DdpOptions())
    assert ours.numel == real.numel == real.param_data.numel()
    assert ours.numel_unpadded == real.numel_unpadded
    assert list(ours.buckets) == [tuple(i) for i in real.bucket_indices]
    starts = sorted(real.param_index_map[p][:2] for p in real.params)
    assert sorted(ours.param_ranges) == starts


def test_padding_rules_by_hand() -> None:
    assert pad_param_start(0) == 0
    assert pad_param_start(1) == 64
    assert pad_param_start(64) == 64
    assert bucket_end_divisor(6) == 384  # lcm(6, 128)
    assert bucket_end_divisor(6, high_nccl_busbw=True) == 196608  # lcm(6, 128, 65536)
    assert pad_bucket_end(1000, 8) == 1024
    assert pad_bucket_end(1000, 3) == 1152


def test_padding_rules_match_megatron_019_source() -> None:
    # megatron-core 0.19.2 made the rules plain functions (optimizer/param_layout.py)
    import importlib.util
    from pathlib import Path

    path = Path("/tmp/mc19/megatron/core/optimizer/param_layout.py")
    if not path.exists():
        pytest.skip("megatron-core 0.19.2 source not unpacked here")
    spec = importlib.util.spec_from_file_location("mc19_param_layout", path)
    assert spec and spec.loader
    mc19 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc19)
    for value in (0, 1, 63, 64, 65, 1000, 65_537, 10**9 + 7):
        assert pad_param_start(value) == mc19.pad_param_start(value)
        for dp in (1, 2, 3, 8, 12, 96, 1000):
            for busbw in (False, True):
                assert pad_bucket_end(value, dp, busbw) == mc19.pad_bucket_end(value, dp, busbw)


# ------------------------------------------------------------ projection arithmetic

QWEN3_235B = GptShape(
    num_layers=94,
    hidden_size=4096,
    num_attention_heads=64,
    num_query_groups=4,
    kv_channels=128,
    vocab_size=151936,
    num_experts=128,
    moe_ffn_hidden_size=1536,
    qk_layernorm=True,
)
VERL_PAR = Parallelism(
    tp=4, pp=8, ep=4, dp=2, gpus_per_node=8, first_stage_layers=11, last_stage_layers=11
)


def test_qwen3_235b_expert_buffer_by_hand() -> None:
    layout = lay_out_model(QWEN3_235B, VERL_PAR)
    middle = layout.stages[3]
    dense, expert = middle.buffers
    assert middle.num_layers == 12
    # 12 layers x 32 local experts x (fc1 2*1536*4096 + fc2 4096*1536); all 64-aligned
    assert expert.numel_unpadded == 12 * 32 * 3 * 1536 * 4096 == 7_247_757_312
    assert expert.numel == pad_bucket_end(7_247_757_312, VERL_PAR.expert_dp)
    assert expert.param_bytes == expert.numel * 2
    assert expert.grad_bytes == expert.numel * 4
    # dense per layer: qkv (64+8)*128/4*4096 + proj 4096*64*128/4 + router 128*4096
    # + 2 norms of 4096 + q/k norms of 128 (each padded to 64-multiples: already are)
    per_layer = 72 * 32 * 4096 + 4096 * 2048 + 128 * 4096 + 2 * 4096 + 2 * 128
    assert dense.numel_unpadded == 12 * per_layer
    assert (dense.kind, expert.kind) == ("dense", "expert")
    assert (dense.dp_size, expert.dp_size) == (2, 2)


def test_stage_layer_split_and_nodes() -> None:
    assert stage_layer_counts(94, VERL_PAR) == (11, 12, 12, 12, 12, 12, 12, 11)
    layout = lay_out_model(QWEN3_235B, VERL_PAR)
    assert layout.ranks_per_node == 8
    assert len(layout.node_stages) == 8  # 64 GPUs: one stage (tp*dp = 8 ranks) per node
    assert layout.node_stages[0] == ((0, 8),)
    assert layout.per_node([1] * 8) == (8,) * 8
    small = Parallelism(tp=2, pp=4, dp=1, gpus_per_node=4)
    assert lay_out_model(ParamCount(total_params=10**6), small).node_stages == (
        ((0, 2), (1, 2)),
        ((2, 2), (3, 2)),
    )


def test_first_stage_buckets_only() -> None:
    # megatron turns bucketing off on every stage but the first
    par = Parallelism(pp=2, gpus_per_node=1)
    shape = GptShape(
        num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256
    )
    layout = lay_out_model(shape, par, DdpOptions(overlap_grad_reduce=True, bucket_size=5000))
    assert len(layout.stages[0].buffers[0].buckets) > 1
    assert len(layout.stages[1].buffers[0].buckets) == 1


def test_tied_embeddings_with_pp_get_their_own_buckets() -> None:
    par = Parallelism(pp=2, gpus_per_node=1)
    shape = GptShape(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=128,
        vocab_size=256,
        untie_embeddings_and_output_weights=False,
    )
    first, last = (lay_out_model(shape, par).stages[i].buffers[0] for i in (0, 1))
    assert first.buckets[-1][1] - first.buckets[-1][0] == 256 * 64  # embedding alone, last
    assert len(last.buckets) == 2  # output_layer copy is laid out first (reverse order)


def test_param_count_model_spreads_evenly() -> None:
    par = Parallelism(tp=2, pp=2, ep=2, dp=2, gpus_per_node=8)
    stage = lay_out_model(ParamCount(total_params=1000, expert_params=600), par).stages[0]
    dense, expert = stage.buffers
    assert dense.numel_unpadded == 100  # 400 / (tp*pp)
    assert expert.numel_unpadded == 150  # 600 / (ep*pp)
    assert (dense.numel, expert.numel) == (128, 256)  # ends padded to lcm(dp=2, 128)
    assert [t.value for t in stage.terms if t.label == "dense: dense"] == [100]


def test_terms_add_up() -> None:
    stage = lay_out_model(MOE_SHARED, Parallelism(gpus_per_node=1)).stages[0]
    values = {t.label: t.value for t in stage.terms}
    parts = sum(
        t.value
        for t in stage.terms
        if t.label.startswith("dense: ")
        and t.label
        not in {
            "dense: padding",
            "dense: buffer numel",
            "dense: param_data bytes",
            "dense: grad_data bytes",
        }
    )
    assert parts + values["dense: padding"] == values["dense: buffer numel"]
    assert values["dense: param_data bytes"] == 2 * values["dense: buffer numel"]
    assert values["layers on this stage"] == 3


def test_optimizer_state_classic_and_precision_aware() -> None:
    par = Parallelism(dp=4, gpus_per_node=4)
    buffer = lay_out_model(ParamCount(total_params=1000), par).stages[0].buffers[0]
    assert buffer.numel == 1024  # lcm(4, 128) = 128
    assert [buffer.shard_numel(r) for r in range(4)] == [256, 256, 256, 232]
    classic = optimizer_state(buffer, OptimizerOptions())
    assert (classic.shard_numel, classic.total_bytes) == (256, 256 * 12)
    aware = optimizer_state(
        buffer,
        OptimizerOptions(
            precision_aware=True, exp_avg_dtype="bfloat16", exp_avg_sq_dtype="bfloat16"
        ),
    )
    assert (aware.master_dtype, aware.master_param_bytes) == ("int16", 512)
    assert aware.total_bytes == 256 * (2 + 2 + 2)
    no_remainders = optimizer_state(
        buffer, OptimizerOptions(precision_aware=True, store_param_remainders=False)
    )
    assert no_remainders.master_param_bytes == 256 * 4


def test_optimizer_shard_excludes_alignment_padding() -> None:
    entries = [ParamEntry(name=str(i), numel=n, formula="") for i, n in enumerate((10, 10))]
    buffer = lay_out_buffer(entries, kind="dense", dp_size=2, bucket_size=None, ddp=DdpOptions())
    assert buffer.param_ranges == ((0, 10), (64, 74))
    assert buffer.numel == 128
    assert [buffer.shard_numel(r) for r in (0, 1)] == [10, 10]  # shards [0, 64), [64, 128)
    wide = lay_out_buffer(entries, kind="dense", dp_size=1, bucket_size=None, ddp=DdpOptions())
    assert wide.numel == 128 and wide.shard_numel(0) == 20  # 54 + 54 padding hold no state


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(num_attention_heads=6), "num_attention_heads"),
        (dict(vocab_size=1001), "vocab_size"),
        (dict(num_experts=6), "num_experts"),
    ],
)
def test_impossible_shapes_name_the_field(kwargs: dict[str, int], field: str) -> None:
    base = dict(
        num_layers=4,
        hidden_size=96,
        num_attention_heads=8,
        vocab_size=1000,
        num_experts=8,
        moe_ffn_hidden_size=32,
    )
    shape = GptShape(**{**base, **kwargs})
    with pytest.raises(LayoutError) as err:
        lay_out_model(shape, Parallelism(tp=4, ep=4, dp=1, gpus_per_node=4))
    assert err.value.field == field


def test_impossible_parallelism_names_the_field() -> None:
    with pytest.raises(LayoutError) as err:
        Parallelism(tp=2, ep=4, dp=1, gpus_per_node=2)
    assert err.value.field == "ep"
    with pytest.raises(LayoutError) as err:
        Parallelism(tp=2, dp=3, gpus_per_node=4)
    assert err.value.field == "gpus_per_node"
    with pytest.raises(LayoutError) as err:
        stage_layer_counts(94, Parallelism(pp=8, gpus_per_node=8))
    assert err.value.field == "pp"


def test_expert_buffers_split_like_megatron_019() -> None:
    # allreduce=False for experts when ep > 1 or etp (1) != tp; checked on 2 GPUs with 0.19.2
    assert not Parallelism(gpus_per_node=1).separate_expert_buffers
    assert Parallelism(ep=2, dp=2, gpus_per_node=2).separate_expert_buffers
    assert Parallelism(tp=2, gpus_per_node=2).separate_expert_buffers
    assert Parallelism(tp=2, ep=2, gpus_per_node=2).expert_dp == 1
    assert Parallelism(tp=2, gpus_per_node=2).expert_dp == 2
