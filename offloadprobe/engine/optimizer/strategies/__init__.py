"""Optimizer-state offload strategies: one module per strategy, one registry.

A strategy is a module of this package exporting ``STRATEGY`` (found by its text, as
model strategies are), an
:class:`~offloadprobe.engine.descriptors.OptimizerStrategyInfo`: an object
with ``offload(optimizers)``/``load(optimizers)`` over ``[model.optimizer]`` (verl's
signature), plus what ``plan`` needs to project it. Third parties register a descriptor or
a class under the ``offloadprobe.optimizer_strategies`` entry-point group, or pass
``--optimizer-strategy package.module:object``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offloadprobe.core.engines import register_engine_strategies
from offloadprobe.core.registry import Registry, is_user_spec
from offloadprobe.engine.strategies.user import third_party

GROUP = "offloadprobe.optimizer_strategies"
FLAG = "--optimizer-strategy"


def _info_class() -> type:
    from offloadprobe.engine.descriptors import OptimizerStrategyInfo

    return OptimizerStrategyInfo


OPTIMIZER_STRATEGIES: Registry[Any] = Registry(
    "optimizer strategy", GROUP, third_party(_info_class, FLAG)
)
OPTIMIZER_STRATEGIES.register_package(
    __name__, Path(__file__).parent, first=("legacy", "fixed", "complete", "none", "mcore")
)
# every engine's own strategies, after these
register_engine_strategies(OPTIMIZER_STRATEGIES, of="OptimizerStrategyInfo")


def optimizer_strategy(spec: str) -> Any:
    """The descriptor of a registered name or of the user's ``package.module:object``;
    fails (exit 2) before any model is built on a spec that cannot work."""
    from offloadprobe.engine.descriptors import OptimizerStrategyInfo
    from offloadprobe.engine.strategies.user import load_object

    if is_user_spec(spec):
        return OptimizerStrategyInfo(
            name=spec,
            summary=f"user optimizer strategy {spec}",
            factory=load_object(spec, flag=FLAG, needs=("offload", "load")),
            emulation="the user's code, run as written",
            engines=(),  # a user's own code serves any engine
        )
    return OPTIMIZER_STRATEGIES.get(spec)


__all__ = ["FLAG", "OPTIMIZER_STRATEGIES", "optimizer_strategy"]
