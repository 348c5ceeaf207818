"""Which optimizer the probe model trains with, and building it through megatron-core.

:class:`OptimizerChoice` is the validated record of the choice (classic Adam over
megatron's fp32 main params, or the precision-aware optimizer with its state dtypes);
:func:`build_optimizer` hands it to ``get_megatron_optimizer`` and names the inner
optimizer that was actually built.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from offloadprobe.errors import UsageError
from offloadprobe.optimizer.precision_adam import describe, megatron_uses, preferred_adam_class

STATE_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "uint8": torch.uint8,
}
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
            if value not in STATE_DTYPES:
                raise UsageError(
                    f"{flag} {value!r} is not a state dtype: choose one of "
                    + ", ".join(STATE_DTYPES)
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

    @property
    def adam_class(self) -> type | None:
        """The class the precision-aware optimizer uses here; None in classic mode."""
        return preferred_adam_class() if self.precision_aware else None

    def megatron_context(self) -> contextlib.AbstractContextManager[Any]:
        """Open around megatron optimizer construction and DistributedOptimizer checkpoints."""
        cls = self.adam_class
        return megatron_uses(cls) if cls is not None else contextlib.nullcontext()


def _megatron_config(choice: OptimizerChoice) -> Any:
    from megatron.core.optimizer import OptimizerConfig

    extra: dict[str, Any] = {}
    if choice.precision_aware:
        extra = {
            "use_precision_aware_optimizer": True,
            "exp_avg_dtype": STATE_DTYPES[choice.exp_avg_dtype],
            "exp_avg_sq_dtype": STATE_DTYPES[choice.exp_avg_sq_dtype],
            "store_param_remainders": choice.store_param_remainders,
        }
    return OptimizerConfig(
        optimizer="adam",
        lr=choice.lr,
        weight_decay=choice.weight_decay,
        adam_beta1=choice.adam_beta1,
        adam_beta2=choice.adam_beta2,
        adam_eps=choice.adam_eps,
        bf16=True,
        use_distributed_optimizer=True,
        clip_grad=choice.clip_grad,
        **extra,
    )


def inner_optimizers(optimizer: Any) -> list[Any]:
    """The megatron optimizers inside ``optimizer`` (a ChainedOptimizer's, or itself)."""
    return list(getattr(optimizer, "chained_optimizers", None) or [optimizer])


def build_optimizer(choice: OptimizerChoice, chunks: list[Any]) -> tuple[Any, str]:
    """megatron's DistributedOptimizer (bf16) over ``chunks``, and the inner Adam's name."""
    from megatron.core.optimizer import get_megatron_optimizer

    with choice.megatron_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimizer = get_megatron_optimizer(_megatron_config(choice), chunks)
    classes = {
        type(part.optimizer)
        for part in inner_optimizers(optimizer)
        if getattr(part, "optimizer", None) is not None
    }
    return optimizer, ", ".join(sorted(describe(cls) for cls in classes))
