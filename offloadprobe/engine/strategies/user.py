"""Load the user's own strategy: an object, or a framework's pair of plain functions.

Two spec forms, for ``--strategy`` and ``--optimizer-strategy`` alike:

``package.module:object``
    A class (instantiated with the runtime when its ``__init__`` takes an argument, else
    with none) or an instance; either way it must have ``offload`` and ``load``.
``package.module:offload_fn,load_fn[@each]``
    Two functions of one module, used as they are. By default each is called once with
    the list offloadprobe hands a strategy (the model chunks; ``[optimizer]``), the
    convention of verl's ``offload_megatron_model_to_cpu(models)``. With ``@each`` each is
    called once per item (``fn(optimizer)``), the convention of verl's
    ``offload_megatron_optimizer(optimizer)``. A function may carry literal keyword
    arguments: ``load_megatron_model_to_gpu(load_grad=True)``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from offloadprobe.core.errors import StrategyError

_CALL = re.compile(r"^([A-Za-z_][\w.]*)(?:\((.*)\))?$")
_FORMS = "package.module:object or package.module:offload_fn,load_fn[@each]"


class FunctionPair:
    """``offload``/``load`` over a framework's two functions, list or per-item convention."""

    def __init__(self, offload: Callable[..., Any], load: Callable[..., Any], each: bool) -> None:
        self._offload, self._load, self.each = offload, load, each

    def _call(self, fn: Callable[..., Any], items: list[Any]) -> None:
        for arg in items if self.each else [items]:
            fn(arg)

    def offload(self, items: list[Any]) -> None:
        self._call(self._offload, items)

    def load(self, items: list[Any]) -> None:
        self._call(self._load, items)


def _import(spec: str, flag: str) -> tuple[Any, str]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StrategyError(f"{flag} {spec!r} is not of the form {_FORMS}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name), attr
    except Exception as exc:  # the user's module may fail in any way while importing
        raise StrategyError(
            f"{flag} {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); "
            "make it importable from the current directory or PYTHONPATH"
        ) from None


def _attribute(spec: str, flag: str, module: Any, path: str) -> Any:
    obj = module
    for part in path.split("."):
        if not hasattr(obj, part):
            raise StrategyError(
                f"{flag} {spec!r}: module {module.__name__!r} has no attribute {part!r}"
            )
        obj = getattr(obj, part)
    return obj


def _function(spec: str, flag: str, module: Any, text: str) -> Callable[..., Any]:
    match = _CALL.match(text.strip())
    if match is None:
        raise StrategyError(f"{flag} {spec!r}: {text!r} is not a function name")
    fn = _attribute(spec, flag, module, match[1])
    if not callable(fn):
        raise StrategyError(f"{flag} {spec!r}: {match[1]!r} is not callable")
    if not match[2]:
        return fn
    try:
        call = ast.parse(f"f({match[2]})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError, AssertionError):
        raise StrategyError(
            f"{flag} {spec!r}: arguments of {match[1]!r} must be keyword=literal, "
            "e.g. load_megatron_model_to_gpu(load_grad=True)"
        ) from None
    _accepts(spec, flag, match[1], fn, kwargs)
    return functools.partial(fn, **kwargs)


def _accepts(spec: str, flag: str, name: str, fn: Callable[..., Any], kwargs: dict) -> None:
    """Every bound keyword is one ``fn`` takes: exit 2 now, not a TypeError at cycle 0."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): called as given
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    named = {k for k, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    unknown = [k for k in kwargs if k not in named]
    if unknown:
        words = ", ".join(f"{k}=" for k in unknown)
        takes = ", ".join(params) or "no parameters"
        raise StrategyError(
            f"{flag} {spec!r}: {name}() takes no {words} (its parameters: {takes}); drop it "
            "or name a function that takes it"
        )


def _pair(spec: str, flag: str, module: Any, attr: str) -> FunctionPair:
    body, each = (attr.removesuffix("@each"), True) if attr.endswith("@each") else (attr, False)
    names = re.split(r",(?![^(]*\))", body)  # commas outside keyword arguments
    if len(names) != 2 or "@" in body:
        raise StrategyError(
            f"{flag} {spec!r}: give two functions, package.module:offload_fn,load_fn, "
            "optionally followed by @each to call them once per item"
        )
    offload, load = (_function(spec, flag, module, name) for name in names)
    return FunctionPair(offload, load, each)


def import_object(spec: str, *, flag: str) -> Any:
    """Import ``module:object`` (``object`` may be dotted), or build the
    :class:`FunctionPair` of ``module:offload_fn,load_fn[@each]``, from the current
    directory or the Python path."""
    module, attr = _import(spec, flag)
    if "," in attr:
        return _pair(spec, flag, module, attr)
    return _attribute(spec, flag, module, attr)


def checked(obj: Any, *, spec: str, flag: str, needs: tuple[str, ...] = ("offload", "load")) -> Any:
    """``obj`` (a class or an instance) if it has every method in ``needs``."""
    missing = [name for name in needs if not callable(getattr(obj, name, None))]
    if missing:
        raise StrategyError(
            f"{flag} {spec!r} lacks {' and '.join(missing)}: provide "
            + ", ".join(f"{n}(...)" for n in needs)
            + ", or name two functions as package.module:offload_fn,load_fn"
        )
    return obj


def load_object(spec: str, *, flag: str, needs: tuple[str, ...]) -> Any:
    """Import and check ``module:object`` (a class or an instance) or a function pair."""
    return checked(import_object(spec, flag=flag), spec=spec, flag=flag, needs=needs)


def user_model_strategy(spec: str) -> Any:
    """The descriptor of the user's model strategy ``package.module:...``."""
    from offloadprobe.engine.descriptors import ModelStrategyInfo

    return ModelStrategyInfo(
        name=spec,
        summary=f"user strategy {spec}",
        factory=load_object(spec, flag="--strategy", needs=("offload", "load")),
        emulation="the user's code, run as written",
    )


def third_party(info_class: Callable[[], type], flag: str) -> Callable[[str, Any], Any]:
    """A registry's adapter: an entry point's descriptor as it is, or a bare class (or
    instance) with ``offload``/``load`` wrapped in the descriptor ``info_class()`` builds."""

    def adapt(name: str, found: Any) -> Any:
        cls = info_class()
        if isinstance(found, cls):
            return found
        doc = (getattr(found, "__doc__", None) or f"{name} (third party)").strip()
        return cls(
            name=name,
            summary=doc.split("\n")[0],
            factory=checked(found, spec=name, flag=flag),
            emulation="third-party code, run as written",
        )

    return adapt
