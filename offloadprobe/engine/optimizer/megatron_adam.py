"""Making megatron-core build our precision-aware Adam where TransformerEngine is missing.

megatron-core's ``get_megatron_optimizer`` insists on TransformerEngine's ``FusedAdam``
for ``use_precision_aware_optimizer``. :func:`megatron_uses` patches, for the duration of
a block, exactly the places that check for it, so megatron builds the given class
(TE's own when installed, else offloadprobe's ``PrecisionAwareAdam``).
The Adam maths live in ``precision_adam``; this module is only the integration.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import Any
from unittest import mock

from offloadprobe.engine.optimizer.precision_adam import (
    _PRECISION_KWARGS,
    _TE_MISSING,
    FUSED_ADAM_API_VERSION,
    PrecisionAwareAdam,
)

__all__ = ["describe", "megatron_uses", "preferred_adam_class", "transformer_engine_fused_adam"]


def transformer_engine_fused_adam() -> type | None:
    """TransformerEngine's ``FusedAdam`` class when it imports (as megatron sees it), else None."""
    try:
        from transformer_engine.pytorch.optimizers import FusedAdam
    except ImportError:
        return None
    return FusedAdam


def preferred_adam_class() -> type:
    """TE's ``FusedAdam`` when installed, otherwise :class:`PrecisionAwareAdam`."""
    return transformer_engine_fused_adam() or PrecisionAwareAdam


def describe(adam_cls: type | None = None) -> str:
    """Name the optimizer class for run output, saying why it was chosen."""
    te_adam = transformer_engine_fused_adam()
    adam_cls = adam_cls or preferred_adam_class()
    if te_adam is not None and adam_cls is te_adam:
        import transformer_engine

        return f"TransformerEngine FusedAdam ({getattr(transformer_engine, '__version__', '?')})"
    if issubclass(adam_cls, PrecisionAwareAdam):
        why = "TransformerEngine not installed" if te_adam is None else "chosen over TE's FusedAdam"
        return f"offloadprobe PrecisionAwareAdam ({why})"
    return f"{adam_cls.__module__}.{adam_cls.__qualname__}"


def _te_min_version_as_fused_adam_api(version: str, check_equality: bool = True) -> bool:
    """Stand-in for megatron's ``is_te_min_version``: answers for FUSED_ADAM_API_VERSION."""
    from packaging.version import Version

    have, want = Version(FUSED_ADAM_API_VERSION), Version(version)
    return have >= want if check_equality else have > want


def _tolerate_missing_te(original: Any) -> Any:
    """Wrap ``OptimizerConfig.__post_init__`` so its 'TE is not installed' error is skipped.

    That error is the last statement of the precision-aware branch in megatron-core
    0.16.1 and 0.19.2, so nothing else is skipped; the signature check that sits next to
    it is done by :func:`megatron_uses` on the class actually used.
    """

    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        try:
            original(self)
        except RuntimeError as err:
            if not (self.use_precision_aware_optimizer and _TE_MISSING in str(err)):
                raise

    return __post_init__


def _megatron_patches(adam_cls: type) -> list[tuple[Any, str, Any]]:
    from megatron.core import optimizer as mc_optimizer
    from megatron.core.optimizer import distrib_optimizer, optimizer_config

    config_cls = optimizer_config.OptimizerConfig

    patches: list[tuple[Any, str, Any]] = [
        (mc_optimizer, "Adam", adam_cls),  # the class get_megatron_optimizer instantiates
        (mc_optimizer, "USING_PYTORCH_OPTIMIZER", False),  # else it picks torch.optim.AdamW
        (distrib_optimizer, "Adam", adam_cls),  # 0.16.1 asserts isinstance(optimizer, Adam)
        (distrib_optimizer, "HAVE_APEX_OR_TE", True),  # state_dict: step lives in param_groups
        (distrib_optimizer, "USING_TE_OPTIMIZER", True),
    ]
    if transformer_engine_fused_adam() is None:
        patches += [  # without TE: answer megatron's TE version probe (0.16.1 raises TypeError,
            # 0.19.2 says 0.0.0 and drops store_param_remainders) and skip the config's TE import
            (mc_optimizer, "is_te_min_version", _te_min_version_as_fused_adam_api),
            (optimizer_config, "is_te_min_version", _te_min_version_as_fused_adam_api),
            (
                config_cls,
                "__post_init__",
                _tolerate_missing_te(config_cls.__dict__["__post_init__"]),
            ),
        ]
    return patches


@contextlib.contextmanager
def megatron_uses(adam_cls: type = PrecisionAwareAdam) -> Iterator[tuple[str, ...]]:
    """While open, megatron-core builds ``adam_cls`` where it would build TE's ``FusedAdam``.

    Construct ``OptimizerConfig`` and call ``get_megatron_optimizer`` inside the block;
    keep it open around ``DistributedOptimizer`` state_dict save/load too (those read the
    patched flags). Training steps do not need it. Everything is restored on exit.
    Inside, a config without ``use_precision_aware_optimizer`` gets ``adam_cls`` too, as a
    plain FusedAdam over megatron's fp32 main params. Yields the dotted names replaced.
    """
    missing = [k for k in _PRECISION_KWARGS if k not in inspect.signature(adam_cls).parameters]
    if missing:
        raise TypeError(f"{adam_cls.__qualname__} lacks precision-aware arguments {missing}")
    patches = _megatron_patches(adam_cls)
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            if not hasattr(owner, name):
                raise RuntimeError(f"this megatron-core has no {_label(owner, name)} to patch")
            stack.enter_context(mock.patch.object(owner, name, value))
        yield tuple(_label(owner, name) for owner, name, _ in patches)


def _label(owner: Any, name: str) -> str:
    prefix = owner.__name__ if inspect.ismodule(owner) else f"{owner.__module__}.{owner.__name__}"
    return f"{prefix}.{name}"
