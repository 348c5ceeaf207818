"""Which optimizer the probe model trains with, and building it through megatron-core.

:class:`OptimizerChoice` is the validated record of the choice (classic Adam over
megatron's fp32 main params, or the precision-aware optimizer with its state dtypes);
:func:`build_optimizer` hands it to ``get_megatron_optimizer`` and names the inner
optimizer that was actually built.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from offloadprobe.core.config import OptimizerChoice
from offloadprobe.engine.optimizer.megatron_adam import (
    describe,
    megatron_uses,
    preferred_adam_class,
)

STATE_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "uint8": torch.uint8,
}
"""Adam moment dtypes the precision-aware optimizer stores (uint8 holds FP8 E4M3 + a scale)."""


def adam_class(choice: OptimizerChoice) -> type | None:
    """The class the precision-aware optimizer uses here; None in classic mode."""
    return preferred_adam_class() if choice.precision_aware else None


def megatron_context(choice: OptimizerChoice) -> contextlib.AbstractContextManager[Any]:
    """Open around megatron optimizer construction and DistributedOptimizer checkpoints."""
    cls = adam_class(choice)
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

    with megatron_context(choice), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimizer = get_megatron_optimizer(_megatron_config(choice), chunks)
    classes = {
        type(part.optimizer)
        for part in inner_optimizers(optimizer)
        if getattr(part, "optimizer", None) is not None
    }
    return optimizer, ", ".join(sorted(describe(cls) for cls in classes))
