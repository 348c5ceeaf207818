"""Load the user's own strategy from ``package.module:object``.

The object may be a class (instantiated with the runtime when its ``__init__`` takes an
argument, else with none) or an instance; either way it must have ``offload`` and ``load``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from offloadprobe.core.errors import StrategyError


def is_user_spec(spec: str) -> bool:
    """True for ``package.module:object`` specs, False for registered names."""
    return ":" in spec


def import_object(spec: str, *, flag: str) -> Any:
    """Import ``module:object`` (``object`` may be dotted) from the current directory or
    the Python path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StrategyError(f"{flag} {spec!r} is not of the form package.module:object")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may fail in any way while importing
        raise StrategyError(
            f"{flag} {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); "
            "make it importable from the current directory or PYTHONPATH"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise StrategyError(
                f"{flag} {spec!r}: module {module_name!r} has no attribute {part!r}"
            )
        obj = getattr(obj, part)
    return obj


def checked(obj: Any, *, spec: str, flag: str, needs: tuple[str, ...] = ("offload", "load")) -> Any:
    """``obj`` (a class or an instance) if it has every method in ``needs``."""
    missing = [name for name in needs if not callable(getattr(obj, name, None))]
    if missing:
        raise StrategyError(
            f"{flag} {spec!r} lacks {' and '.join(missing)}: provide "
            + ", ".join(f"{n}(...)" for n in needs)
        )
    return obj


def load_object(spec: str, *, flag: str, needs: tuple[str, ...]) -> Any:
    """Import and check ``module:object`` (a class or an instance)."""
    return checked(import_object(spec, flag=flag), spec=spec, flag=flag, needs=needs)


def user_model_strategy(spec: str) -> Any:
    """The descriptor of the user's model strategy ``package.module:object``."""
    from offloadprobe.engine.strategies.base import ModelStrategyInfo

    return ModelStrategyInfo(
        name=spec,
        summary=f"user strategy {spec}",
        factory=load_object(spec, flag="--strategy", needs=("offload", "load")),
        emulation="the user's code, run as written",
    )
