"""Per-rank megatron-core DDP buffer sizes, derived the way megatron-core lays them out.

What is reproduced (megatron-core 0.16.1 ``distributed/param_and_grad_buffer.py``
``_ParamAndGradBuffer.__init__``; 0.19.2 moved the same rules into
``optimizer/param_layout.py`` and ``DistributedOptimizer._compute_per_buffer_param_layout``),
for ``use_distributed_optimizer=True``:

* parameters are grouped into one buffer per ``(param_dtype, grad_dtype)``, split into
  dense ``buffers`` and ``expert_parallel_buffers`` (params with ``allreduce=False``:
  experts when ep > 1 or, since 0.19, when the expert tensor-parallel size differs from
  tp; 0.16.1 keeps experts dense whenever ep = 1, which moves only bucket padding);
  ``grad_dtype`` is fp32 when ``grad_reduce_in_fp32`` else the param dtype;
* params are laid out in reverse ``named_parameters()`` order, each starting on a
  64-element boundary;
* a bucket closes once it holds ``bucket_size`` elements, and around a
  ``shared_embedding`` param (tied embeddings with pp > 1); each bucket end is padded to
  ``lcm(dp, 128)`` (``lcm(dp, 128, 2**16)`` with ``pad_buckets_for_high_nccl_busbw``);
  dense buffers use the data-parallel size, expert buffers the expert-data-parallel size;
* DDP turns bucketing off (``bucket_size=None``) when ``overlap_grad_reduce`` is off and
  on every pipeline stage but the first; a ``bucket_size`` left at None with overlap on
  becomes ``max(40_000_000, 1_000_000 * dp)``.

The parameter list follows the local layer spec (``get_gpt_layer_local_spec``;
``SequentialMLP`` experts). Other specs hold the same elements in another order, which
moves only the sub-64-element alignment padding. Context parallelism is 1 and the expert
tensor-parallel size is 1.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from offloadprobe.errors import UsageError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int16": 2, "float8": 1, "uint8": 1}
PARAM_ALIGN = 64
"""Param start alignment in elements (megatron: 128 bytes of >= 16-bit values)."""
BUCKET_ALIGN = 128
"""Bucket end alignment in elements, combined with the data-parallel size by lcm."""
BUSBW_ALIGN = 2**16
"""Extra bucket alignment with ``pad_buckets_for_high_nccl_busbw``."""

BufferKind = Literal["dense", "expert"]


class LayoutError(UsageError):
    """A model or parallelism that megatron-core would refuse; ``field`` names the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True, kw_only=True, slots=True)
class GptShape:
    """A GPT / MoE model as megatron-core's ``TransformerConfig`` describes it."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    """Vocabulary as the model is built (already padded, if the trainer pads it)."""
    num_query_groups: int | None = None
    """Key/value heads (GQA); None means one per attention head."""
    kv_channels: int | None = None
    """Head dimension; None means ``hidden_size // num_attention_heads``."""
    ffn_hidden_size: int | None = None
    """Dense MLP width; required when any layer is dense."""
    num_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    moe_ffn_hidden_size: int | None = None
    """Width of one routed expert."""
    num_dense_layers: int = 0
    """With experts: the first layers that keep a dense MLP (megatron ``moe_layer_freq``)."""
    shared_expert_ffn_hidden_size: int = 0
    """Width of the shared expert (``moe_shared_expert_intermediate_size``), 0 for none."""
    swiglu: bool = True
    """Gated MLPs (``gated_linear_unit``): fc1 is twice as wide."""
    untie_embeddings_and_output_weights: bool = True
    normalization: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    """LayerNorm adds a bias next to every norm weight."""
    qk_layernorm: bool = False
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    position_embedding: Literal["rope", "learned_absolute"] = "rope"
    max_sequence_length: int = 0
    """Rows of the learned position embedding; only with ``learned_absolute``."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            _positive(name, getattr(self, name))
        if self.num_experts:
            if not self.moe_ffn_hidden_size:
                raise LayoutError("moe_ffn_hidden_size", "set it for a model with experts")
            if not 0 <= self.num_dense_layers <= self.num_layers:
                raise LayoutError("num_dense_layers", "must lie between 0 and num_layers")
        if (not self.num_experts or self.num_dense_layers) and not self.ffn_hidden_size:
            raise LayoutError("ffn_hidden_size", "set it: the model has dense MLP layers")
        if self.num_attention_heads % self.query_groups:
            raise LayoutError(
                "num_query_groups",
                f"{self.query_groups} does not divide {self.num_attention_heads} heads; "
                "use a group count that divides the head count",
            )
        if self.position_embedding == "learned_absolute" and self.max_sequence_length <= 0:
            raise LayoutError("max_sequence_length", "set it for learned_absolute positions")

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    def is_moe_layer(self, index: int) -> bool:
        return self.num_experts > 0 and index >= self.num_dense_layers


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCount:
    """A model known only by its parameter counts: spread evenly, one tensor per buffer."""

    total_params: int
    expert_params: int = 0
    """Routed-expert parameters inside ``total_params``."""

    def __post_init__(self) -> None:
        _positive("total_params", self.total_params)
        if not 0 <= self.expert_params <= self.total_params:
            raise LayoutError("expert_params", "must lie between 0 and total_params")


ModelSpec = GptShape | ParamCount


@dataclass(frozen=True, kw_only=True, slots=True)
class Parallelism:
    """Megatron parallel sizes (context parallel 1, expert tensor parallel 1)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    gpus_per_node: int = 8
    first_stage_layers: int | None = None
    """megatron ``num_layers_in_first_pipeline_stage``."""
    last_stage_layers: int | None = None
    """megatron ``num_layers_in_last_pipeline_stage``."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp", "gpus_per_node"):
            _positive(name, getattr(self, name))
        if (self.tp * self.dp) % self.ep:
            raise LayoutError(
                "ep",
                f"ep={self.ep} does not divide tp*dp={self.tp * self.dp} (expert data "
                "parallel size); lower ep or raise dp",
            )
        if self.world_size % self.gpus_per_node:
            raise LayoutError(
                "gpus_per_node",
                f"tp*pp*dp={self.world_size} GPUs do not fill nodes of {self.gpus_per_node}; "
                "make tp*pp*dp a multiple of gpus_per_node",
            )

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: ``tp * dp / (ep * etp)`` with etp = 1."""
        return self.tp * self.dp // self.ep

    @property
    def separate_expert_buffers(self) -> bool:
        """Experts leave the dense buffers when ep > 1 or etp (1) != tp (megatron 0.19.2)."""
        return self.ep > 1 or self.tp != 1


@dataclass(frozen=True, kw_only=True, slots=True)
class DdpOptions:
    """The ``DistributedDataParallelConfig`` fields that shape the buffers."""

    param_dtype: str = "bfloat16"
    grad_reduce_in_fp32: bool = True
    overlap_grad_reduce: bool = False
    bucket_size: int | None = None
    pad_buckets_for_high_nccl_busbw: bool = False

    def __post_init__(self) -> None:
        if self.param_dtype not in DTYPE_BYTES:
            raise LayoutError("param_dtype", f"use one of {', '.join(DTYPE_BYTES)}")

    @property
    def grad_dtype(self) -> str:
        return "float32" if self.grad_reduce_in_fp32 else self.param_dtype


# ---------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True, slots=True)
class Term:
    """One line of arithmetic a user can check: ``label``: ``formula`` = ``value``."""

    label: str
    formula: str
    value: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamEntry:
    """One parameter tensor on one rank, in ``named_parameters()`` order."""

    name: str
    numel: int
    formula: str
    """How ``numel`` follows from the shape, e.g. ``(64+2*4)*128/4 * 4096``."""
    expert: bool = False
    shared_embedding: bool = False


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

    def max_shard_numel(self) -> int:
        """The largest optimizer shard over the data-parallel ranks."""
        return max(self.shard_numel(r) for r in range(self.dp_size))


@dataclass(frozen=True, kw_only=True, slots=True)
class StageLayout:
    """The buffers of one rank of pipeline stage ``pp_rank`` (all its ranks are alike)."""

    pp_rank: int
    num_layers: int
    buffers: tuple[BufferLayout, ...]
    terms: tuple[Term, ...]

    @property
    def param_bytes(self) -> int:
        return sum(b.param_bytes for b in self.buffers)

    @property
    def grad_bytes(self) -> int:
        return sum(b.grad_bytes for b in self.buffers)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelLayout:
    """Buffers per pipeline stage, and which stages share each node."""

    parallelism: Parallelism
    stages: tuple[StageLayout, ...]
    node_stages: tuple[tuple[tuple[int, int], ...], ...]
    """Per node: ``(pp_rank, ranks of that stage on the node)``; megatron's default
    rank order puts tp innermost and pp outermost."""

    @property
    def ranks_per_node(self) -> int:
        return self.parallelism.gpus_per_node

    def per_node(self, per_rank: Sequence[int]) -> tuple[int, ...]:
        """Sum a per-stage, per-rank quantity over each node's ranks."""
        return tuple(sum(per_rank[s] * n for s, n in node) for node in self.node_stages)


# ---------------------------------------------------------------- padding rules


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


# ---------------------------------------------------------------- parameters


def stage_layer_counts(num_layers: int, par: Parallelism) -> tuple[int, ...]:
    """Layers per pipeline stage (megatron ``get_num_layers_to_build``)."""
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        if num_layers % par.pp:
            raise LayoutError(
                "pp", f"pp={par.pp} does not divide {num_layers} layers; set first/last layers"
            )
        return (num_layers // par.pp,) * par.pp
    rest, stages = (
        num_layers - (first or 0) - (last or 0),
        par.pp - (first is not None) - (last is not None),
    )
    if rest < 0 or stages < 0 or (stages and rest % stages) or (not stages and rest):
        raise LayoutError(
            "first_stage_layers",
            f"{num_layers} layers do not split as first={first}, last={last} over "
            f"pp={par.pp}; the layers left must split evenly over the middle stages",
        )
    middle = rest // stages if stages else 0
    counts = [middle] * par.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def gpt_stage_parameters(shape: GptShape, par: Parallelism, pp_rank: int) -> tuple[ParamEntry, ...]:
    """The parameters one rank of ``pp_rank`` holds, in local-spec ``named_parameters()`` order."""
    _check_shape(shape, par)
    tp, h, kv = par.tp, shape.hidden_size, shape.head_dim
    glu = 2 if shape.swiglu else 1
    counts = stage_layer_counts(shape.num_layers, par)
    first_layer = sum(counts[:pp_rank])
    first, last = pp_rank == 0, pp_rank == par.pp - 1
    tied_copy = not shape.untie_embeddings_and_output_weights and par.pp > 1
    out: list[ParamEntry] = []

    def add(name: str, numel: int, formula: str, **flags: bool) -> None:
        out.append(ParamEntry(name=name, numel=numel, formula=formula, **flags))

    def norm(prefix: str, width: int, formula: str) -> None:
        add(f"{prefix}.weight", width, formula)
        if shape.normalization == "LayerNorm":
            add(f"{prefix}.bias", width, formula)

    def linear(prefix: str, rows: int, cols: int, rf: str, cf: str, bias: bool, **f: bool) -> None:
        add(f"{prefix}.weight", rows * cols, f"{rf} * {cf}", **f)
        if bias:
            add(f"{prefix}.bias", rows, rf, **f)

    if first:
        add(
            "embedding.word_embeddings.weight",
            shape.vocab_size // tp * h,
            f"{shape.vocab_size}/{tp} * {h}",
            shared_embedding=tied_copy and not last,
        )
        if shape.position_embedding == "learned_absolute":
            add(
                "embedding.position_embeddings.weight",
                shape.max_sequence_length * h,
                f"{shape.max_sequence_length} * {h}",
            )
    heads, groups, bias = shape.num_attention_heads, shape.query_groups, shape.add_bias_linear
    for local in range(counts[pp_rank]):
        p = f"decoder.layers.{local}"
        norm(f"{p}.input_layernorm", h, f"{h}")
        linear(
            f"{p}.self_attention.linear_proj",
            h,
            heads * kv // tp,
            f"{h}",
            f"{heads}*{kv}/{tp}",
            bias,
        )
        linear(
            f"{p}.self_attention.linear_qkv",
            (heads + 2 * groups) * kv // tp,
            h,
            f"({heads}+2*{groups})*{kv}/{tp}",
            f"{h}",
            bias or shape.add_qkv_bias,
        )
        if shape.qk_layernorm:
            norm(f"{p}.self_attention.q_layernorm", kv, f"{kv}")
            norm(f"{p}.self_attention.k_layernorm", kv, f"{kv}")
        norm(f"{p}.pre_mlp_layernorm", h, f"{h}")
        if not shape.is_moe_layer(first_layer + local):
            ffn = shape.ffn_hidden_size or 0
            linear(f"{p}.mlp.linear_fc1", glu * ffn // tp, h, f"{glu}*{ffn}/{tp}", f"{h}", bias)
            linear(f"{p}.mlp.linear_fc2", h, ffn // tp, f"{h}", f"{ffn}/{tp}", bias)
            continue
        experts, moe_ffn = shape.num_experts, shape.moe_ffn_hidden_size or 0
        linear(f"{p}.mlp.router", experts, h, f"{experts}", f"{h}", bias)
        for e in range(experts // par.ep):
            q = f"{p}.mlp.experts.local_experts.{e}"
            linear(
                f"{q}.linear_fc1", glu * moe_ffn, h, f"{glu}*{moe_ffn}", f"{h}", bias, expert=True
            )
            linear(f"{q}.linear_fc2", h, moe_ffn, f"{h}", f"{moe_ffn}", bias, expert=True)
        if shared := shape.shared_expert_ffn_hidden_size:
            linear(
                f"{p}.mlp.shared_experts.linear_fc1",
                glu * shared // tp,
                h,
                f"{glu}*{shared}/{tp}",
                f"{h}",
                False,
            )
            linear(
                f"{p}.mlp.shared_experts.linear_fc2",
                h,
                shared // tp,
                f"{h}",
                f"{shared}/{tp}",
                False,
            )
    if last:
        norm("decoder.final_layernorm", h, f"{h}")
        if shape.untie_embeddings_and_output_weights or tied_copy:
            add(
                "output_layer.weight",
                shape.vocab_size // tp * h,
                f"{shape.vocab_size}/{tp} * {h}",
                shared_embedding=tied_copy,
            )
    return tuple(out)


def count_stage_parameters(model: ParamCount, par: Parallelism) -> tuple[ParamEntry, ...]:
    """Even split of a bare parameter count: one dense and one expert tensor per rank."""
    dense = model.total_params - model.expert_params
    out = [
        ParamEntry(
            name="dense",
            numel=-(-dense // (par.tp * par.pp)),
            formula=f"ceil({dense} / (tp*pp = {par.tp}*{par.pp}))",
        )
    ]
    if model.expert_params:
        out.append(
            ParamEntry(
                name="experts",
                numel=-(-model.expert_params // (par.ep * par.pp)),
                formula=f"ceil({model.expert_params} / (ep*pp = {par.ep}*{par.pp}))",
                expert=True,
            )
        )
    return tuple(out)


def check_model_fits(model: ModelSpec, par: Parallelism) -> None:
    """Raise ``LayoutError`` naming the field when megatron could not split ``model``."""
    if isinstance(model, GptShape):
        _check_shape(model, par)
        stage_layer_counts(model.num_layers, par)


def _check_shape(shape: GptShape, par: Parallelism) -> None:
    checks = (
        ("num_attention_heads", shape.num_attention_heads, par.tp, "tp"),
        ("num_query_groups", shape.query_groups, par.tp, "tp"),
        ("vocab_size", shape.vocab_size, par.tp, "tp"),
        ("ffn_hidden_size", shape.ffn_hidden_size or 0, par.tp, "tp"),
        ("shared_expert_ffn_hidden_size", shape.shared_expert_ffn_hidden_size, par.tp, "tp"),
        ("num_experts", shape.num_experts, par.ep, "ep"),
    )
    for field, value, divisor, by in checks:
        if value % divisor:
            raise LayoutError(
                field, f"{value} is not divisible by {by}={divisor}; choose {by} to divide it"
            )


# ---------------------------------------------------------------- the layout


def lay_out_model(model: ModelSpec, par: Parallelism, ddp: DdpOptions | None = None) -> ModelLayout:
    """Every pipeline stage's buffers for ``model`` under ``par``."""
    ddp = ddp or DdpOptions()
    stages = []
    for pp_rank in range(par.pp):
        if isinstance(model, GptShape):
            params = gpt_stage_parameters(model, par, pp_rank)
            layers = stage_layer_counts(model.num_layers, par)[pp_rank]
        else:
            params, layers = count_stage_parameters(model, par), 0
        stages.append(_lay_out_stage(params, par, ddp, pp_rank, layers))
    return ModelLayout(parallelism=par, stages=tuple(stages), node_stages=_node_stages(par))


def _lay_out_stage(
    params: Sequence[ParamEntry], par: Parallelism, ddp: DdpOptions, pp_rank: int, layers: int
) -> StageLayout:
    split = par.separate_expert_buffers
    groups: list[tuple[BufferKind, list[ParamEntry], int]] = [
        ("dense", [p for p in params if not (split and p.expert)], par.dp),
        ("expert", [p for p in params if split and p.expert], par.expert_dp),
    ]
    bucket_size = effective_bucket_size(ddp, par.dp, pp_rank)
    buffers = tuple(
        lay_out_buffer(group, kind=kind, dp_size=dp, bucket_size=bucket_size, ddp=ddp)
        for kind, group, dp in groups
        if group
    )
    terms = [Term(label="layers on this stage", formula=_split_formula(par, pp_rank), value=layers)]
    for (kind, group, dp), buffer in zip([g for g in groups if g[1]], buffers, strict=True):
        terms += _buffer_terms(kind, group, buffer, dp, bucket_size, ddp)
    return StageLayout(pp_rank=pp_rank, num_layers=layers, buffers=buffers, terms=tuple(terms))


def _buffer_terms(
    kind: BufferKind,
    group: Sequence[ParamEntry],
    buffer: BufferLayout,
    dp: int,
    bucket_size: int | None,
    ddp: DdpOptions,
) -> list[Term]:
    by_component: dict[str, tuple[ParamEntry, int]] = {}
    for p in group:
        key = _component(p.name)
        entry, count = by_component.get(key, (p, 0))
        by_component[key] = (entry, count + 1)
    terms = [
        Term(
            label=f"{kind}: {key}", formula=f"{count} x {entry.formula}", value=count * entry.numel
        )
        for key, (entry, count) in by_component.items()
    ]
    divisor = bucket_end_divisor(dp, ddp.pad_buckets_for_high_nccl_busbw)
    buckets = "one bucket" if bucket_size is None else f"buckets of >= {bucket_size}"
    pw, gw = DTYPE_BYTES[buffer.param_dtype], DTYPE_BYTES[buffer.grad_dtype]
    return [
        *terms,
        Term(
            label=f"{kind}: padding",
            formula=f"params start at multiples of {PARAM_ALIGN}; "
            f"{buckets} end at multiples of lcm(dp={dp}, {BUCKET_ALIGN}"
            f"{', 2**16' if ddp.pad_buckets_for_high_nccl_busbw else ''}) = {divisor}",
            value=buffer.numel - sum(p.numel for p in group),
        ),
        Term(label=f"{kind}: buffer numel", formula="params + padding", value=buffer.numel),
        Term(
            label=f"{kind}: param_data bytes",
            formula=f"{buffer.numel} x {pw} ({buffer.param_dtype})",
            value=buffer.param_bytes,
        ),
        Term(
            label=f"{kind}: grad_data bytes",
            formula=f"{buffer.numel} x {gw} ({buffer.grad_dtype})",
            value=buffer.grad_bytes,
        ),
    ]


def _component(name: str) -> str:
    parts = name.split(".")
    return ".".join("*" if part.isdigit() else part for part in parts)


def _split_formula(par: Parallelism, pp_rank: int) -> str:
    if par.first_stage_layers is None and par.last_stage_layers is None:
        return f"num_layers / pp={par.pp}"
    return (
        f"first={par.first_stage_layers}, last={par.last_stage_layers}, "
        f"the rest split evenly; stage {pp_rank}"
    )


def _node_stages(par: Parallelism) -> tuple[tuple[tuple[int, int], ...], ...]:
    per_stage = par.tp * par.dp
    nodes = []
    for node in range(par.world_size // par.gpus_per_node):
        counts: dict[int, int] = {}
        for rank in range(node * par.gpus_per_node, (node + 1) * par.gpus_per_node):
            counts[rank // per_stage] = counts.get(rank // per_stage, 0) + 1
        nodes.append(tuple(sorted(counts.items())))
    return tuple(nodes)


def _positive(field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise LayoutError(field, f"must be a positive integer, got {value!r}; use 1 or more")


# ---------------------------------------------------------------- optimizer state


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerOptions:
    """Adam state of megatron's distributed optimizer (``OptimizerConfig`` fields)."""

    precision_aware: bool = False
    """``use_precision_aware_optimizer``: TE FusedAdam holds ``master_param`` itself."""
    main_params_dtype: str = "float32"
    store_param_remainders: bool = True
    """With bf16 params, keep only the low 16 bits of the fp32 master (int16)."""
    exp_avg_dtype: str = "float32"
    exp_avg_sq_dtype: str = "float32"

    def __post_init__(self) -> None:
        for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise LayoutError(name, f"use one of {', '.join(DTYPE_BYTES)}")
        if (
            not self.precision_aware
            and (self.main_params_dtype, self.exp_avg_dtype, self.exp_avg_sq_dtype)
            != ("float32",) * 3
        ):
            raise LayoutError("precision_aware", "set it to true for non-fp32 optimizer state")

    def master_dtype(self, param_dtype: str) -> str | None:
        """dtype of the master copy, None when the params are themselves the fp32 master."""
        if not self.precision_aware:
            return None if param_dtype == "float32" else "float32"
        if self.store_param_remainders and param_dtype == "bfloat16":
            return "int16"
        return self.main_params_dtype


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerState:
    """Adam state one rank holds for one buffer: its shard of the buffer's parameters."""

    kind: BufferKind
    shard_numel: int
    """Parameter elements of the largest data-parallel shard (padding holds no state)."""
    master_dtype: str | None
    master_param_bytes: int
    """fp32 main params (classic, ``shard_fp32_from_float16_groups``) or the
    precision-aware ``master_param`` state (int16 remainders by default)."""
    exp_avg_bytes: int
    exp_avg_sq_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.master_param_bytes + self.exp_avg_bytes + self.exp_avg_sq_bytes


def optimizer_state(buffer: BufferLayout, opt: OptimizerOptions) -> OptimizerState:
    """Adam state on the worst data-parallel rank for ``buffer``."""
    n = buffer.max_shard_numel()
    master = opt.master_dtype(buffer.param_dtype)
    return OptimizerState(
        kind=buffer.kind,
        shard_numel=n,
        master_dtype=master,
        master_param_bytes=n * DTYPE_BYTES[master] if master else 0,
        exp_avg_bytes=n * DTYPE_BYTES[opt.exp_avg_dtype],
        exp_avg_sq_bytes=n * DTYPE_BYTES[opt.exp_avg_sq_dtype],
    )


def optimizer_terms(state: OptimizerState, dp_size: int) -> tuple[Term, ...]:
    """The arithmetic behind ``state``, for display next to the buffer terms."""
    n, k = state.shard_numel, state.kind
    return (
        Term(
            label=f"{k}: optimizer shard numel",
            formula=f"largest of {dp_size} shards, params only",
            value=n,
        ),
        Term(
            label=f"{k}: master params",
            formula=f"{n} x {state.master_dtype or 'none'}",
            value=state.master_param_bytes,
        ),
        Term(label=f"{k}: exp_avg", formula=f"{n} elements", value=state.exp_avg_bytes),
        Term(label=f"{k}: exp_avg_sq", formula=f"{n} elements", value=state.exp_avg_sq_bytes),
    )
