"""What a layout is computed from: the model shape, the parallel sizes, the DDP options.

Every record validates itself in ``__post_init__`` and raises ``LayoutError`` naming
the field megatron-core would refuse, so a scenario file can point at the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from offloadprobe.core.errors import UsageError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int16": 2, "float8": 1, "uint8": 1}


class LayoutError(UsageError):
    """A model or parallelism that megatron-core would refuse; ``field`` names the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Indivisible(LayoutError):
    """``value_name = value`` is not divisible by ``by = divisor`` (megatron splits one by
    the other); ``field`` is the input megatron refuses, as for any ``LayoutError``."""

    def __init__(
        self,
        field: str,
        *,
        value_name: str,
        value: int,
        by: str,
        divisor: int,
        message: str | None = None,
    ) -> None:
        super().__init__(
            field,
            message or f"{value} is not divisible by {by}={divisor}; choose {by} to divide it",
        )
        self.value_name, self.value, self.by, self.divisor = value_name, value, by, divisor

    def divisors(self, limit: int = 12) -> list[int]:
        """The divisors of ``value`` (at most ``limit`` of them, the smallest)."""
        small = [d for d in range(1, math.isqrt(self.value) + 1) if self.value % d == 0]
        found = sorted({*small, *(self.value // d for d in small)})
        return found[:limit]

    @property
    def next_multiple(self) -> int:
        """The smallest multiple of ``divisor`` at or above ``value``."""
        return -(-self.value // self.divisor) * self.divisor


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
    """Megatron parallel sizes (context parallel 1)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    expert_tp: int = 1
    """Expert tensor-parallel size (megatron ``expert_tensor_parallel_size``): experts'
    fc1/fc2 are split this many ways. megatron-core defaults it to tp, but MoE layers with
    linear biases need 1 (offloadprobe's probe), and trainers such as verl set 1."""
    expert_buffers_by_etp: bool = True
    """megatron-core 0.19: experts leave the dense buffers when ep > 1 or etp != tp. False:
    0.16.1's rule, only when ep > 1."""
    gpus_per_node: int = 8
    first_stage_layers: int | None = None
    """megatron ``num_layers_in_first_pipeline_stage``."""
    last_stage_layers: int | None = None
    """megatron ``num_layers_in_last_pipeline_stage``."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp", "expert_tp", "gpus_per_node"):
            _positive(name, getattr(self, name))
        if (self.tp * self.dp) % (self.ep * self.expert_tp):
            raise LayoutError(
                "ep",
                f"ep*expert_tp={self.ep * self.expert_tp} does not divide "
                f"tp*dp={self.tp * self.dp} (expert data parallel size); lower ep or raise dp",
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
        """Expert data-parallel size: ``tp * dp / (ep * etp)``."""
        return self.tp * self.dp // (self.ep * self.expert_tp)

    @property
    def separate_expert_buffers(self) -> bool:
        """Experts leave the dense buffers when ep > 1 or, with ``expert_buffers_by_etp``
        (megatron-core 0.19.2), etp != tp; 0.16.1 only when ep > 1."""
        return self.ep > 1 or (self.expert_buffers_by_etp and self.expert_tp != self.tp)


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


def _positive(field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise LayoutError(field, f"must be a positive integer, got {value!r}; use 1 or more")
