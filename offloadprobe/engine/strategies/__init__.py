"""Model-parameter offload strategies: one module per strategy, one registry.

A strategy is a module of this package exporting ``STRATEGY``, a
:class:`~offloadprobe.engine.strategies.base.ModelStrategyInfo`, registered below by
module path (imported on first use). Third parties register a descriptor or a class with
``offload(models)``/``load(models)`` under the ``offloadprobe.model_strategies``
entry-point group, or pass ``--strategy package.module:object``. Every verb (run,
compare, plan, repro) reads this registry.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.registry import Registry

GROUP = "offloadprobe.model_strategies"
FLAG = "--strategy"


def _adapt(name: str, found: Any) -> Any:
    from offloadprobe.engine.strategies.base import ModelStrategyInfo
    from offloadprobe.engine.strategies.user import checked

    if isinstance(found, ModelStrategyInfo):
        return found
    return ModelStrategyInfo(
        name=name,
        summary=(getattr(found, "__doc__", None) or f"{name} (third party)").strip().split("\n")[0],
        factory=checked(found, spec=name, flag=FLAG),
        emulation="third-party code, run as written",
    )


MODEL_STRATEGIES: Registry[Any] = Registry("model strategy", GROUP, _adapt)
for _name in ("naive", "lazy", "registered", "pipelined", "pageable", "mcore", "tms", "none"):
    MODEL_STRATEGIES.register_module(_name, f"{__name__}.{_name}")


def model_strategy(spec: str) -> Any:
    """The descriptor of a registered name or of the user's ``package.module:object``;
    fails (exit 2) before any model is built on a spec that cannot work."""
    from offloadprobe.engine.strategies.user import is_user_spec, user_model_strategy

    if is_user_spec(spec):
        return user_model_strategy(spec)
    return MODEL_STRATEGIES.get(spec)


__all__ = ["FLAG", "MODEL_STRATEGIES", "model_strategy"]
