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

    def __init__(
        self,
        offload: Callable[..., Any],
        load: Callable[..., Any],
        each: bool,
        names: tuple[str, str] = ("offload", "load"),
    ) -> None:
        self._offload, self._load, self.each = offload, load, each
        self.names = names
        """The functions' names as the spec gives them (for messages)."""

    @property
    def functions(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """The two callables as they are called (bound keywords included)."""
        return self._offload, self._load

    def _call(self, fn: Callable[..., Any], items: list[Any], device: Any = None) -> None:
        extra = (device,) if device is not None and _takes_device(fn) else ()
        for arg in items if self.each else [items]:
            fn(arg, *extra)

    def offload(self, items: list[Any]) -> None:
        self._call(self._offload, items)

    def load(self, items: list[Any], *, device: Any = None) -> None:
        """``load(items)``; a load function that takes a device id after its argument
        (verl's ``load_fsdp_optimizer(optimizer, device_id)``) gets ``device``."""
        self._call(self._load, items, device)


def _takes_device(fn: Callable[..., Any]) -> bool:
    import inspect

    from offloadprobe.engine.strategies.user_calls import takes_device

    try:
        return takes_device(inspect.signature(fn))
    except (TypeError, ValueError):
        return False


def _import(spec: str, flag: str) -> tuple[Any, str]:
    module_name, attr = split_spec(spec, flag)
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


def parse_function(spec: str, flag: str, text: str) -> tuple[str, dict[str, Any]]:
    """``name`` or ``name(key=literal, ...)``: the (dotted) name and the bound keywords;
    nothing is imported."""
    match = _CALL.match(text.strip())
    if match is None:
        raise StrategyError(f"{flag} {spec!r}: {text!r} is not a function name")
    if not match[2]:
        return match[1], {}
    try:
        call = ast.parse(f"f({match[2]})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError, AssertionError):
        raise StrategyError(
            f"{flag} {spec!r}: arguments of {match[1]!r} must be keyword=literal, "
            "e.g. load_megatron_model_to_gpu(load_grad=True)"
        ) from None
    return match[1], kwargs


def parse_pair(spec: str, flag: str, attr: str) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The two functions of ``offload_fn,load_fn[@each]`` (names and bound keywords) and
    whether they are called once per item; nothing is imported."""
    body, each = (attr.removesuffix("@each"), True) if attr.endswith("@each") else (attr, False)
    names = re.split(r",(?![^(]*\))", body)  # commas outside keyword arguments
    if len(names) != 2 or "@" in body:
        raise StrategyError(
            f"{flag} {spec!r}: give two functions, package.module:offload_fn,load_fn, "
            "optionally followed by @each to call them once per item"
        )
    return [parse_function(spec, flag, name) for name in names], each


def split_spec(spec: str, flag: str) -> tuple[str, str]:
    """``(module, attr)`` of ``module:attr``; nothing is imported."""
    module_name, _, attr = spec.partition(":")
    if not module_name.strip() or not attr.strip():
        raise StrategyError(f"{flag} {spec!r} is not of the form {_FORMS}")
    return module_name.strip(), attr.strip()


def _function(
    spec: str, flag: str, module: Any, name: str, kwargs: dict[str, Any]
) -> Callable[..., Any]:
    fn = _attribute(spec, flag, module, name)
    if not callable(fn):
        raise StrategyError(f"{flag} {spec!r}: {name!r} is not callable")
    return functools.partial(fn, **kwargs) if kwargs else fn


def _pair(spec: str, flag: str, module: Any, attr: str) -> FunctionPair:
    (offload, load), each = parse_pair(spec, flag, attr)
    return FunctionPair(
        _function(spec, flag, module, *offload),
        _function(spec, flag, module, *load),
        each,
        names=(offload[0], load[0]),
    )


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
    """Import and check ``module:object`` (a class or an instance) or a function pair: its
    methods, and that each can be called as offloadprobe calls it (``user_calls``)."""
    from offloadprobe.engine.strategies.user_calls import check_loaded

    found = checked(import_object(spec, flag=flag), spec=spec, flag=flag, needs=needs)
    check_loaded(found, spec=spec, flag=flag)
    return found


def user_model_strategy(spec: str) -> Any:
    """The descriptor of the user's model strategy ``package.module:...``."""
    from offloadprobe.engine.descriptors import ModelStrategyInfo

    return ModelStrategyInfo(
        name=spec,
        summary=f"user strategy {spec}",
        factory=load_object(spec, flag="--strategy", needs=("offload", "load")),
        emulation="the user's code, run as written",
        engines=(),  # a user's own code serves any engine
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
            engines=(),  # a bare class: called with whatever the engine's strategies get
        )

    return adapt
