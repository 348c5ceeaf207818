"""Optimizer-state offload strategies: one registry, one module per strategy.

A strategy is an object with ``offload(optimizers)`` and ``load(optimizers)`` (and an
optional ``close()``) over ``[model.optimizer]``, verl's signature. Built-ins are registered
below; third parties register theirs under the ``offloadprobe.optimizer_strategies``
entry-point group, or pass ``--optimizer-strategy package.module:object``.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.registry import Registry
from offloadprobe.engine.optimizer.strategies.base import OptimizerStrategy
from offloadprobe.engine.optimizer.strategies.complete import CompleteStrategy
from offloadprobe.engine.optimizer.strategies.fixed import FixedStrategy
from offloadprobe.engine.optimizer.strategies.legacy import LegacyStrategy
from offloadprobe.engine.optimizer.strategies.none import NoOffload
from offloadprobe.engine.runtime import Runtime
from offloadprobe.engine.strategies.user import is_user_spec, load_object

FLAG = "--optimizer-strategy"

OPTIMIZER_STRATEGIES: Registry[OptimizerStrategy] = Registry(
    "optimizer strategy", "offloadprobe.optimizer_strategies"
)
OPTIMIZER_STRATEGIES.register(
    "legacy", "exp_avg, exp_avg_sq and fp32 groups moved with .to(); master_param stays (pre-fix)"
)(LegacyStrategy)
OPTIMIZER_STRATEGIES.register("fixed", "legacy plus master_param (verl PR 6635's fix)")(
    FixedStrategy
)
OPTIMIZER_STRATEGIES.register(
    "complete", "every optimizer tensor, any key, into exact-size reused host buffers"
)(CompleteStrategy)
OPTIMIZER_STRATEGIES.register("none", "moves nothing")(NoOffload)


def make_optimizer_strategy(spec: str, runtime: Runtime) -> Any:
    """Instantiate a registered optimizer strategy or load the user's ``module:object``."""
    if is_user_spec(spec):
        return load_object(spec, flag=FLAG, needs=("offload", "load"))
    return OPTIMIZER_STRATEGIES.get(spec).factory(runtime)


def validate_optimizer_strategy(spec: str) -> None:
    """Fail early, before any model is built, on a name or spec that cannot work."""
    if is_user_spec(spec):
        load_object(spec, flag=FLAG, needs=("offload", "load"))
    else:
        OPTIMIZER_STRATEGIES.get(spec)


__all__ = [
    "OPTIMIZER_STRATEGIES",
    "OptimizerStrategy",
    "make_optimizer_strategy",
    "validate_optimizer_strategy",
]
