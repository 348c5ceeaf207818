"""Typed records back from their JSON form: the inverse of ``dataclasses.asdict``.

``rebuild(cls, data)`` walks ``cls``'s type hints: a field whose hint is a dataclass (or a
list, tuple or dict of them, or an optional one) is rebuilt from its dict; anything else is
taken as it is (tuples from lists where the hint says tuple). Keys the record does not
have are ignored, so a newer file reads with an older record's fields.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return rebuild(hint, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is type(None):
                continue
            if isinstance(arg, type) and dataclasses.is_dataclass(arg) and isinstance(value, dict):
                return rebuild(arg, value)
            if typing.get_origin(arg) in (list, tuple, dict):
                return _value(arg, value)
        return value
    if origin is list:
        return [_value(args[0], v) for v in value] if args else list(value)
    if origin is tuple:
        inner = args[0] if args else Any
        return tuple(_value(inner, v) for v in value)
    if origin is dict and len(args) == 2:
        return {k: _value(args[1], v) for k, v in value.items()}
    return value


def rebuild(cls: type, data: dict[str, Any]) -> Any:
    """A ``cls`` record from its ``asdict`` form."""
    hints = _hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            fields[f.name] = _value(hints[f.name], data[f.name])
    return cls(**fields)
