"""Validated configuration records: the probe model's shape and one run's settings."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from offloadprobe.core.errors import UsageError

BF16_BYTES = 2
EMULATION_MALLOC = ("real", "fixed")
"""CPU emulation's glibc malloc modes (``RunConfig.emulation_malloc``)."""
STATE_DTYPE_NAMES = ("fp32", "bf16", "fp16", "uint8")
"""Adam moment dtypes the precision-aware optimizer stores (uint8 holds FP8 E4M3 + a scale)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerChoice:
    """The optimizer megatron-core builds for the probe model (always Adam, bf16 params)."""

    precision_aware: bool = False
    """``use_precision_aware_optimizer``: Adam on the bf16 shards, master weights in its state."""
    exp_avg_dtype: str = "fp32"
    """Storage dtype of ``exp_avg``: fp32, bf16, fp16 or uint8 (precision-aware only)."""
    exp_avg_sq_dtype: str = "fp32"
    """Storage dtype of ``exp_avg_sq``: fp32, bf16, fp16 or uint8 (precision-aware only)."""
    store_param_remainders: bool = False
    """Keep only the int16 low halves of the fp32 master (precision-aware only)."""
    lr: float = 1e-4
    """Learning rate."""
    weight_decay: float = 0.01
    """Decoupled (AdamW) weight decay."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    """Gradient-norm clip; 0 disables it."""

    def __post_init__(self) -> None:
        for flag, value in (
            ("--exp-avg-dtype", self.exp_avg_dtype),
            ("--exp-avg-sq-dtype", self.exp_avg_sq_dtype),
        ):
            if value not in STATE_DTYPE_NAMES:
                raise UsageError(
                    f"{flag} {value!r} is not a state dtype: choose one of "
                    + ", ".join(STATE_DTYPE_NAMES)
                )
            if value != "fp32" and not self.precision_aware:
                raise UsageError(
                    f"{flag} {value} needs the precision-aware optimizer: add --precision-aware "
                    "or keep fp32"
                )
        if self.store_param_remainders and not self.precision_aware:
            raise UsageError(
                "parameter remainders need the precision-aware optimizer: add --precision-aware"
            )
        if not self.lr > 0:
            raise UsageError(f"the learning rate must be positive, got {self.lr}")
        if self.weight_decay < 0 or self.clip_grad < 0:
            raise UsageError("weight decay and clip_grad must be 0 or more")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1 and self.adam_eps > 0):
            raise UsageError("Adam needs 0 <= beta1, beta2 < 1 and eps > 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """Shape of the megatron-core GPT the probe builds (local layer spec, bf16 params)."""

    num_layers: int = 4
    """Transformer layers."""
    hidden_size: int = 1024
    """Model width; must be divisible by ``num_attention_heads``."""
    num_attention_heads: int = 16
    """Attention heads."""
    vocab_size: int = 8192
    """Vocabulary size (embedding and untied output layer)."""
    seq_length: int = 32
    """Tokens per sample in the train step. The step exists to give the optimizer real
    state and the DDP buffers real grads: its tokens cost time (a bf16 GEMM on a CPU
    without bf16 units is slow), not bytes of the payload."""
    micro_batch_size: int = 1
    """Samples per train step."""
    num_experts: int = 0
    """Routed experts per layer (megatron ``num_moe_experts``); 0 for a dense model. With
    experts every layer's MLP is an MoE layer of experts as wide as the dense MLP (4h)."""
    moe_router_topk: int = 2
    """Experts each token is routed to (with ``num_experts``)."""
    ref_model: bool = False
    """A frozen reference model of the policy's shape beside it, not DDP-wrapped (the KL
    term's reference policy), passed to strategies after the DDP chunks."""
    frozen_fraction: float = 0.0
    """Freeze about this fraction of the policy's parameters (decoder weights first) before
    DDP wraps it, so they live outside the DDP buffers, as LoRA's base weights do."""
    workspace_cache_bytes: int = 0
    """Device bytes the forward pass puts in a module-level cache no parameter references,
    as TransformerEngine's FP8 weight workspaces (``engine/model/workspace.py``); 0: none."""
    preset: str | None = None
    """A shape preset of the engine's (FSDP2: ``qwen2.5-7b``, ``qwen3-8b``, ``llama3.1-8b``,
    ``plain``): block shapes from a real model, ``num_layers`` of them; None: megatron's
    shape from the fields above."""

    def __post_init__(self) -> None:
        if self.num_experts < 0:
            raise UsageError(f"--num-experts must be 0 or more, got {self.num_experts}")
        if not 0 <= self.frozen_fraction < 1:
            raise UsageError(
                f"--frozen-fraction must be at least 0 and below 1, got {self.frozen_fraction}"
            )
        if self.workspace_cache_bytes < 0:
            raise UsageError(
                f"--workspace-cache must be 0 or more, got {self.workspace_cache_bytes}"
            )
        if self.num_experts and not 1 <= self.moe_router_topk <= self.num_experts:
            raise UsageError(
                f"--moe-router-topk {self.moe_router_topk} must lie between 1 and "
                f"--num-experts {self.num_experts}"
            )
        for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            if getattr(self, name) <= 0:
                raise UsageError(f"--{_flag(name)} must be positive, got {getattr(self, name)}")
        for name in ("seq_length", "micro_batch_size"):
            if getattr(self, name) <= 0:
                raise UsageError(f"--{_flag(name)} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"--heads {self.num_attention_heads} does not divide --hidden {self.hidden_size}: "
                "choose a head count that divides the hidden size"
            )

    @property
    def param_count(self) -> int:
        """Parameters of the local-spec GPTModel (LayerNorm with bias, untied output layer);
        with experts, each layer's MLP is replaced by ``num_experts`` MLPs and a router."""
        return model_param_count(
            self.num_layers, self.hidden_size, self.vocab_size, self.seq_length, self.num_experts
        )


def model_param_count(layers: int, hidden: int, vocab: int, seq: int, experts: int = 0) -> int:
    """``gpt_param_count`` with ``experts`` MLPs and a router (an ``E x h`` weight and an
    ``E`` bias, megatron-core 0.16 with linear biases) in place of each layer's MLP;
    checked against a real build in tests/integration/test_ranks_cpu.py."""
    dense = gpt_param_count(layers, hidden, vocab, seq)
    if not experts:
        return dense
    mlp = 8 * hidden * hidden + 5 * hidden
    return dense + layers * (experts * mlp + experts * (hidden + 1) - mlp)


def gpt_param_count(layers: int, hidden: int, vocab: int, seq: int) -> int:
    """Parameter count of megatron's GPTModel with the local layer spec.

    Per layer: QKV (3h*h + 3h), projection (h*h + h), fc1 (4h*h + 4h), fc2 (4h*h + h),
    two LayerNorms (2h each). Plus the final LayerNorm (2h), the word embedding and the
    untied output layer (V*h each) and learned positions (S*h).
    """
    per_layer = 12 * hidden * hidden + 13 * hidden
    return layers * per_layer + 2 * hidden + 2 * vocab * hidden + seq * hidden


def size_for_payload(base: ModelConfig, payload_bytes: int) -> ModelConfig:
    """Return ``base`` resized so its bf16 parameters take about ``payload_bytes``.

    The width is solved from the layer count, rounded to a multiple of 128 that the
    head count divides; the vocabulary then absorbs the remainder (a multiple of 128),
    which lands the parameter bytes within one vocabulary step of the request.
    """
    target = payload_bytes // BF16_BYTES
    layers, heads, seq = base.num_layers, base.num_attention_heads, base.seq_length
    step = math.lcm(128, heads)
    experts = base.num_experts
    mlps = max(1, experts)
    a = layers * (4 + 8 * mlps)
    b = layers * (8 + 5 * mlps + experts) + 2 + seq + 2 * base.vocab_size
    hidden = int((-b + math.sqrt(b * b + 4 * a * target)) / (2 * a))
    hidden = max(step, hidden // step * step)
    fixed = model_param_count(layers, hidden, 0, seq, experts)
    vocab = max(128, round((target - fixed) / (2 * hidden) / 128) * 128)
    if model_param_count(layers, hidden, vocab, seq, experts) * BF16_BYTES > 2 * payload_bytes:
        raise UsageError(
            f"--payload {payload_bytes} B is too small for {layers} layers: "
            "lower --layers or raise --payload"
        )
    return replace(base, hidden_size=hidden, vocab_size=vocab)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelConfig:
    """megatron-core's parallel sizes for a run over several ranks; dp is what remains of
    the world size (``world / (tp * pp * cp)``)."""

    tp: int = 1
    """Tensor-parallel size."""
    pp: int = 1
    """Pipeline-parallel size."""
    ep: int = 1
    """Expert-parallel size (needs ``num_experts``)."""
    cp: int = 1
    """Context-parallel size."""
    vpp: int | None = None
    """Virtual pipeline stages per pipeline rank (interleaved schedule), or None."""
    shards: int | None = None
    """FSDP2: the shard count to reproduce in one process (rank ``shard_rank`` of it,
    through PyTorch's fake process group); None: as many shards as ranks."""
    shard_rank: int = 0
    """FSDP2: which rank of ``shards`` this process plays."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "cp"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.shards is not None and self.shards < 1:
            raise UsageError(f"--shards must be at least 1, got {self.shards}")
        if not 0 <= self.shard_rank < (self.shards or 1):
            raise UsageError(
                f"--shard-rank {self.shard_rank} is not a rank of {self.shards or 1} shards: "
                "give a rank from 0 to --shards minus 1"
            )
        if self.vpp is not None and (self.vpp < 2 or self.pp < 2):
            raise UsageError("--vpp needs --pp 2 or more and at least 2 virtual stages")

    @property
    def model_parallel(self) -> int:
        """Ranks one model replica spans (tp * pp * cp)."""
        return self.tp * self.pp * self.cp

    def dp(self, world_size: int) -> int:
        """Data-parallel size for ``world_size`` ranks; exit 2 when the sizes do not fit."""
        if world_size % self.model_parallel:
            raise UsageError(
                f"{world_size} ranks cannot hold tp {self.tp} x pp {self.pp} x cp {self.cp}: "
                "make the world size (--nproc-per-node x --nnodes) a multiple of their product"
            )
        dp = world_size // self.model_parallel
        if (dp * self.cp) % self.ep:
            raise UsageError(
                f"--ep {self.ep} does not divide dp x cp = {dp * self.cp}: "
                "choose an expert-parallel size that divides it"
            )
        return dp

    def check_model(self, model: ModelConfig) -> None:
        """Raise ``UsageError`` where megatron-core would refuse this model at these sizes."""
        if model.num_attention_heads % self.tp:
            raise UsageError(f"--tp {self.tp} does not divide --heads {model.num_attention_heads}")
        if model.vocab_size % self.tp:
            raise UsageError(f"--tp {self.tp} does not divide --vocab {model.vocab_size}")
        stages = self.pp * (self.vpp or 1)
        if model.num_layers % stages:
            raise UsageError(
                f"--layers {model.num_layers} is not a multiple of the {stages} pipeline "
                "stages (--pp x --vpp): change --layers"
            )
        if model.ref_model and self.pp > 1:
            raise UsageError("--ref-model runs beside the policy on one stage: use --pp 1")
        if self.ep > 1 and not model.num_experts:
            raise UsageError("--ep needs an MoE model: add --num-experts")
        if model.num_experts and model.num_experts % self.ep:
            raise UsageError(f"--ep {self.ep} does not divide --num-experts {model.num_experts}")
        if model.seq_length % (2 * self.cp) and self.cp > 1:
            raise UsageError(f"--seq-length must be a multiple of 2 x --cp ({2 * self.cp})")

    @property
    def is_single(self) -> bool:
        return self.model_parallel == 1 and self.ep == 1


def _flag(name: str) -> str:
    return {
        "num_layers": "layers",
        "hidden_size": "hidden",
        "num_attention_heads": "heads",
        "vocab_size": "vocab",
        "seq_length": "seq-length",
        "micro_batch_size": "micro-batch",
    }[name]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """One ``offloadprobe run``: which strategy, how many cycles, on which device."""

    model: ModelConfig
    strategy: str = "lazy"
    """A registered strategy name or ``package.module:object``."""
    cycles: int = 3
    """Offload/load cycles."""
    train_steps: int = 1
    """Train steps before the first offload and between cycles."""
    device: str = "auto"
    """``cuda``, ``cpu`` or ``auto`` (CUDA when present)."""
    seed: int = 1234
    rollout_claim_bytes: int = 0
    """Device bytes the next phase (a rollout engine) claims between offload and load."""
    gpu_limit_bytes: int | None = None
    """Cap on the device memory this process may allocate (a scaled-down GPU)."""
    optimizer_strategy: str = "none"
    """A registered optimizer-state strategy name or ``package.module:object``."""
    optimizer: OptimizerChoice = field(default_factory=OptimizerChoice)
    """Classic or precision-aware optimizer, and its state dtypes."""
    reference_check: bool = True
    """Compare every train step after a load with a run that never offloaded."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """tp/pp/ep/cp/vpp for a run over several ranks (all 1 for one process)."""
    optimizer_first: bool = False
    """Move the optimizer state before the parameters in both offload and load (verl's
    order, the default, is parameters first). megatron-core's own optimizer offload needs
    it under the precision-aware optimizer, whose params view the DDP param buffer."""
    strategy_options: dict[str, str] = field(default_factory=dict)
    """Options the strategy reads from its runtime (``--strategy-option key=value``), e.g.
    the ``pipelined`` strategy's ``threads``."""
    label: str | None = None
    """The row's name everywhere (``--strategy name=spec``); the pair of strategies if None."""
    sequence: tuple[str, ...] = ()
    """The steps to run instead of ``cycles`` fixed cycles (``core.sequences``); empty:
    the fixed cycle, train -> offload -> load."""
    emulation_malloc: str = "real"
    """CPU emulation's glibc malloc: ``real`` (the process's own, glibc's dynamic mmap
    threshold, as on a GPU host) or ``fixed`` (the threshold fixed at 128 KiB)."""
    engine: str = "megatron"
    """The training engine the run's state lives in (``core.engines``)."""

    def __post_init__(self) -> None:
        if self.cycles <= 0:
            raise UsageError(f"--cycles must be at least 1, got {self.cycles}")
        if self.sequence:
            from offloadprobe.core.sequences import parse_sequence

            parse_sequence(self.sequence)
        if self.train_steps < 0:
            raise UsageError(f"--train-steps must be 0 or more, got {self.train_steps}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise UsageError(f"--device must be auto, cuda or cpu, got {self.device!r}")
        if self.emulation_malloc not in EMULATION_MALLOC:
            raise UsageError(
                f"--emulation-malloc must be real or fixed, got {self.emulation_malloc!r}"
            )
        from offloadprobe.core.engines import ENGINES

        info = ENGINES.get(self.engine)
        if info.check is not None:
            info.check(self)
        self.parallel.check_model(self.model)

    def to_dict(self) -> dict[str, Any]:
        """The one serialised form of a run, read back by :meth:`from_dict` in a child."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Rebuild (and validate) a configuration written by :meth:`to_dict`."""
        fields = dict(data)
        fields["model"] = ModelConfig(**fields["model"])
        fields["optimizer"] = OptimizerChoice(**fields.get("optimizer") or {})
        fields["parallel"] = ParallelConfig(**fields.get("parallel") or {})
        fields["sequence"] = tuple(fields.get("sequence") or ())
        return cls(**fields)
