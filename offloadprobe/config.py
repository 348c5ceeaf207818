"""Validated configuration records: the probe model's shape and one run's settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from offloadprobe.errors import UsageError
from offloadprobe.optimizer.build import OptimizerChoice

BF16_BYTES = 2


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
    seq_length: int = 128
    """Tokens per sample in the train step."""
    micro_batch_size: int = 2
    """Samples per train step."""

    def __post_init__(self) -> None:
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
        """Parameters of the local-spec GPTModel (LayerNorm with bias, shared embedding)."""
        return gpt_param_count(self.num_layers, self.hidden_size, self.vocab_size, self.seq_length)


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
    a, b = 12 * layers, 13 * layers + 2 + seq + 2 * base.vocab_size
    hidden = int((-b + math.sqrt(b * b + 4 * a * target)) / (2 * a))
    hidden = max(step, hidden // step * step)
    fixed = gpt_param_count(layers, hidden, 0, seq)
    vocab = max(128, round((target - fixed) / (2 * hidden) / 128) * 128)
    if gpt_param_count(layers, hidden, vocab, seq) * BF16_BYTES > 2 * payload_bytes:
        raise UsageError(
            f"--payload {payload_bytes} B is too small for {layers} layers: "
            "lower --layers or raise --payload"
        )
    return replace(base, hidden_size=hidden, vocab_size=vocab)


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

    def __post_init__(self) -> None:
        if self.cycles <= 0:
            raise UsageError(f"--cycles must be at least 1, got {self.cycles}")
        if self.train_steps < 0:
            raise UsageError(f"--train-steps must be 0 or more, got {self.train_steps}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise UsageError(f"--device must be auto, cuda or cpu, got {self.device!r}")
