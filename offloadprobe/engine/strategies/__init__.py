"""Model-parameter offload strategies: one module per strategy, one registry.

A strategy is a module of this package exporting ``STRATEGY``, a
:class:`~offloadprobe.engine.descriptors.ModelStrategyInfo`, registered below by
module path (imported on first use). Third parties register a descriptor or a class with
``offload(models)``/``load(models)`` under the ``offloadprobe.model_strategies``
entry-point group, or pass ``--strategy package.module:object``. Every verb (run,
compare, plan, repro) reads this registry.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.registry import Registry, is_user_spec
from offloadprobe.engine.strategies.user import third_party

GROUP = "offloadprobe.model_strategies"
FLAG = "--strategy"


def _info_class() -> type:
    from offloadprobe.engine.descriptors import ModelStrategyInfo

    return ModelStrategyInfo


MODEL_STRATEGIES: Registry[Any] = Registry("model strategy", GROUP, third_party(_info_class, FLAG))
for _name in ("naive", "lazy", "registered", "pipelined", "pageable", "mcore", "tms", "none"):
    MODEL_STRATEGIES.register_module(_name, f"{__name__}.{_name}")
MODEL_STRATEGIES.register_module("hugepin", f"{__name__}.hugepin")
MODEL_STRATEGIES.register_module("relock", f"{__name__}.relock")


def model_strategy(spec: str) -> Any:
    """The descriptor of a registered name or of the user's ``package.module:object``;
    fails (exit 2) before any model is built on a spec that cannot work."""
    from offloadprobe.engine.strategies.user import user_model_strategy

    if is_user_spec(spec):
        return user_model_strategy(spec)
    return MODEL_STRATEGIES.get(spec)


__all__ = ["FLAG", "MODEL_STRATEGIES", "model_strategy"]
