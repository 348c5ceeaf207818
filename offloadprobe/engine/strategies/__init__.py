"""Model-parameter offload strategies: one module per strategy, one registry.

A strategy is a module of this package exporting ``STRATEGY``, a
:class:`~offloadprobe.engine.descriptors.ModelStrategyInfo`, found by its text and
registered by module path (imported on first use): adding one is adding its module.
Third parties register a descriptor or a class with ``offload(models)``/``load(models)``
under the ``offloadprobe.model_strategies`` entry-point group, or pass ``--strategy
package.module:object``. Every verb (run, compare, plan, repro) reads this registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offloadprobe.core.engines import register_engine_strategies
from offloadprobe.core.registry import Registry, is_user_spec
from offloadprobe.engine.strategies.user import third_party

GROUP = "offloadprobe.model_strategies"
FLAG = "--strategy"


def _info_class() -> type:
    from offloadprobe.engine.descriptors import ModelStrategyInfo

    return ModelStrategyInfo


MODEL_STRATEGIES: Registry[Any] = Registry("model strategy", GROUP, third_party(_info_class, FLAG))
MODEL_STRATEGIES.register_package(
    __name__,
    Path(__file__).parent,
    first=("naive", "lazy", "registered", "pipelined", "pageable", "mcore", "tms", "none"),
)
# every engine's own strategies, after these
register_engine_strategies(MODEL_STRATEGIES, of="ModelStrategyInfo")


def model_strategy(spec: str) -> Any:
    """The descriptor of a registered name or of the user's ``package.module:object``;
    fails (exit 2) before any model is built on a spec that cannot work."""
    from offloadprobe.engine.strategies.user import user_model_strategy

    if is_user_spec(spec):
        return user_model_strategy(spec)
    return MODEL_STRATEGIES.get(spec)


__all__ = ["FLAG", "MODEL_STRATEGIES", "model_strategy"]
