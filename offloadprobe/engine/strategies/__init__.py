"""Model-parameter offload strategies: one registry, one module per strategy.

A new strategy is a class with ``offload(models)`` and ``load(models)`` (and an
optional ``close()``) in a module of this package, registered below; third parties
register theirs under the ``offloadprobe.model_strategies`` entry-point group, or
pass ``--strategy package.module:object``.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.registry import Registry
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies.base import ModelStrategy
from offloadprobe.engine.strategies.lazy import LazyStrategy
from offloadprobe.engine.strategies.naive import NaiveStrategy
from offloadprobe.engine.strategies.none import KeepOnDevice
from offloadprobe.engine.strategies.pageable import PageableStrategy
from offloadprobe.engine.strategies.registered import RegisteredStrategy
from offloadprobe.engine.strategies.user import is_user_spec, load_object

MODEL_STRATEGIES: Registry[ModelStrategy] = Registry(
    "model strategy", "offloadprobe.model_strategies"
)
MODEL_STRATEGIES.register("naive", "fresh .cpu().pin_memory() copy every offload (pre-fix)")(
    NaiveStrategy
)
MODEL_STRATEGIES.register("lazy", "one pinned host buffer per DDP buffer, reused (the fix)")(
    LazyStrategy
)
MODEL_STRATEGIES.register(
    "registered", "exact-size host buffer page-locked with cudaHostRegister, reused"
)(RegisteredStrategy)
MODEL_STRATEGIES.register("pageable", "exact-size pageable host buffer, reused, no pinning")(
    PageableStrategy
)

MODEL_STRATEGIES.register("none", "parameters stay on the device (optimizer offload alone)")(
    KeepOnDevice
)


def make_model_strategy(spec: str, runtime: Runtime) -> Any:
    """Instantiate a registered strategy or load the user's ``module:object``."""
    if is_user_spec(spec):
        return load_object(spec, flag="--strategy", needs=("offload", "load"))
    return MODEL_STRATEGIES.get(spec).factory(runtime)


def validate_model_strategy(spec: str) -> None:
    """Fail early, before any model is built, on a name or spec that cannot work."""
    if is_user_spec(spec):
        load_object(spec, flag="--strategy", needs=("offload", "load"))
    else:
        MODEL_STRATEGIES.get(spec)


__all__ = ["MODEL_STRATEGIES", "ModelStrategy", "make_model_strategy", "validate_model_strategy"]
