"""Load the user's own strategy from ``package.module:object``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from offloadprobe.core.errors import StrategyError


def is_user_spec(spec: str) -> bool:
    """True for ``package.module:object`` specs, False for registered names."""
    return ":" in spec


def load_object(spec: str, *, flag: str, needs: tuple[str, ...]) -> Any:
    """Import ``module:object``; instantiate a class; check it has every method in ``needs``."""
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
    if isinstance(obj, type):
        obj = obj()
    missing = [name for name in needs if not callable(getattr(obj, name, None))]
    if missing:
        raise StrategyError(
            f"{flag} {spec!r} lacks {' and '.join(missing)}: provide "
            + ", ".join(f"{n}(...)" for n in needs)
        )
    return obj
