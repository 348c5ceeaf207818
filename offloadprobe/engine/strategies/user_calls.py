"""Whether the user's code can be called as offloadprobe calls it, before anything runs.

offloadprobe calls each function of a pair with one argument (the list of model chunks or
of optimizers; with ``@each``, one item) and the bound keywords, an object's ``offload`` and
``load`` with the list, and builds a class with the runtime when its ``__init__`` takes an
argument, else with nothing (``descriptors.call_factory``). Code of another arity used to
fail with a TypeError at the first offload, after the model was built; here it is exit 2
with one line that says what to change.

One rule (``call_problem``) over an ``inspect.Signature``, read two ways:
``check_loaded`` from the imported objects (``run`` and ``compare`` import the user's module
in the parent anyway, and every worker does), ``check_unloaded`` from the module's source,
found and parsed without running it (``plan``, ``repro`` and the pytest plugin's collection
import no torch; ``user_source``). What the source does not show plainly (a name assigned
or built at import time, an inherited method, a decorator that may change the signature) is
left to the worker, which runs ``check_loaded`` as it loads the code (exit 2 before the
first offload). A decorator that hides the signature (a ``*args, **kwargs`` wrapper without
``functools.wraps``) shows nothing to either: such code fails only when it is called.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from offloadprobe.core.errors import StrategyError
from offloadprobe.core.registry import is_user_spec

_P = inspect.Parameter
_ONE = object()
"""Stands for the one argument offloadprobe passes."""
METHODS = ("offload", "load")


def what_is_passed(flag: str, each: bool) -> str:
    """The one argument a call gets, in words."""
    optimizer = "optimizer" in flag
    if each:
        return "one optimizer" if optimizer else "one model chunk"
    return "the list of optimizers" if optimizer else "the list of model chunks"


def shown(name: str, sig: inspect.Signature) -> str:
    """``name(a, b=..., *args, c, **kw)``: the parameters without their default values."""
    parts, star = [], False
    for p in sig.parameters.values():
        if p.kind is _P.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
        elif p.kind is _P.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            if p.kind is _P.KEYWORD_ONLY and not star:
                parts.append("*")
                star = True
            parts.append(p.name + ("=..." if p.default is not _P.empty else ""))
    return f"{name}({', '.join(parts)})"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def takes_device(sig: inspect.Signature, kwargs: dict[str, Any] | None = None) -> bool:
    """Whether a load of this signature takes a device id after its one argument, as
    verl's ``load_fsdp_optimizer(optimizer, device_id)`` does: the call does not bind with
    one argument, binds with two, and the second is named for a device (``device``,
    ``device_id``); offloadprobe then passes the load's device. Any other second
    parameter is refused as before: its meaning is the user's."""
    kwargs = kwargs or {}
    try:
        sig.bind(_ONE, **kwargs)
        return False
    except TypeError:
        pass
    positional = [
        p
        for p in sig.parameters.values()
        if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 2 or "device" not in positional[1].name:
        return False
    try:
        sig.bind(_ONE, _ONE, **kwargs)
        return True
    except TypeError:
        return False


def call_problem(
    name: str,
    sig: inspect.Signature,
    kwargs: dict[str, Any],
    what: str,
    *,
    pair: bool = True,
    load: bool = False,
) -> str | None:
    """Why ``fn(one_argument, **kwargs)`` would fail for a function of signature ``sig``
    (what is wrong, then how to fix it), or None when the call binds. ``pair``: a function
    of a pair, where keywords can be bound in the spec; else an object's method. ``load``:
    a load, which may take a device id as its second argument (:func:`takes_device`)."""
    try:
        sig.bind(_ONE, **kwargs)
        return None
    except TypeError:
        pass
    if load and takes_device(sig, kwargs):
        return None
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind is _P.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is _P.VAR_KEYWORD for p in params)
    by_keyword = {p.name for p in params if p.kind is not _P.POSITIONAL_ONLY}
    unknown = [k for k in kwargs if k not in by_keyword and not var_keyword]
    if unknown:
        words = ", ".join(f"{k}=" for k in unknown)
        takes = ", ".join(sig.parameters) or "no parameters"
        return (
            f"{name}() takes no {words} (its parameters: {takes}); drop it or name a "
            "function that takes it"
        )
    if not positional and not var_positional:
        return (
            f"{shown(name, sig)} takes no positional argument, and offloadprobe calls it with "
            f"one, {what}: give it a parameter for {what}"
        )
    first = positional[0] if positional else None
    if first is not None and first.name in kwargs and first.kind is not _P.POSITIONAL_ONLY:
        return (
            f"{name}({first.name}=...) binds the parameter offloadprobe passes {what} to: "
            f"drop {first.name}="
        )
    needed = [p.name for p in positional[1:] if p.default is _P.empty and p.name not in kwargs]
    needed += [
        p.name
        for p in params
        if p.kind is _P.KEYWORD_ONLY and p.default is _P.empty and p.name not in kwargs
    ]
    if needed:
        it = "it" if len(needed) == 1 else "them"
        fix = (
            f"give {it} a default, bind {it} in place ({name}({needed[0]}=...)), or name a "
            "function of one argument"
            if pair
            else f"give {it} a default"
        )
        return (
            f"{shown(name, sig)} needs {_names(needed)} besides {what}, the one argument "
            f"offloadprobe calls it with: {fix}"
        )
    return f"{shown(name, sig)} cannot be called with one argument, {what}"


def factory_problem(name: str, sig: inspect.Signature) -> str | None:
    """Why building class ``name`` as ``call_factory`` does would fail, or None."""
    params = list(sig.parameters.values())
    takes = any(
        p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD, _P.VAR_POSITIONAL) for p in params
    )
    try:
        sig.bind(_ONE) if takes else sig.bind()
        return None
    except TypeError:
        pass
    first = 1 if takes else 0
    needed = [
        p.name
        for p in params[first:]
        if p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)
    ]
    it = "it" if len(needed) == 1 else "them"
    how = "with the runtime as its one argument" if takes else "with no argument"
    return (
        f"{shown(name, sig)} needs {_names(needed or ['more'])}, and offloadprobe builds it "
        f"{how}: give {it} a default, or name an instance"
    )


def fail(spec: str, flag: str, problem: str) -> StrategyError:
    return StrategyError(f"{flag} {spec!r}: {problem}")


# ------------------------------------------------------------ the imported objects


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (a builtin): called as given
        return None


def check_loaded(found: Any, *, spec: str, flag: str) -> None:
    """``found`` (a ``FunctionPair``, a class or an instance) callable as offloadprobe calls
    it, read with ``inspect.signature``; a ``StrategyError`` (exit 2) otherwise."""
    from offloadprobe.engine.strategies.user import FunctionPair

    if isinstance(found, FunctionPair):
        what = what_is_passed(flag, found.each)
        for index, (name, fn) in enumerate(zip(found.names, found.functions, strict=True)):
            kwargs: dict[str, Any] = {}
            if isinstance(fn, functools.partial) and not fn.args:
                fn, kwargs = fn.func, dict(fn.keywords)
            sig = _signature(fn)
            problem = (
                call_problem(name, sig, kwargs, what, load=index == 1) if sig is not None else None
            )
            if problem:
                raise fail(spec, flag, problem)
        return
    what = what_is_passed(flag, False)
    cls = found if inspect.isclass(found) else None
    label = getattr(found if cls else type(found), "__name__", "object")
    for method in METHODS:
        bound = getattr(found, method)
        static = cls is not None and isinstance(
            inspect.getattr_static(cls, method, None), staticmethod | classmethod
        )
        sig = _signature(bound)
        if sig is None:
            continue
        if cls is not None and not static:  # a plain function: self comes first
            sig = sig.replace(parameters=list(sig.parameters.values())[1:])
        problem = call_problem(
            f"{label}.{method}", sig, {}, what, pair=False, load=method == "load"
        )
        if problem:
            raise fail(spec, flag, problem)
    if cls is not None and (sig := _signature(cls)) is not None:
        problem = factory_problem(label, sig)
        if problem:
            raise fail(spec, flag, problem)


# ------------------------------------------------------------ the source, not run


def check_unloaded(spec: str, *, flag: str, optimizer: bool | None = None) -> None:
    """A user's spec checked without importing it: its form, its module found (and valid
    Python), each function or method it names callable as offloadprobe calls it, wherever
    its source shows the definition plainly. A registered name passes. ``flag`` starts each
    message (``--strategy``, a scenario's ``[expect]``); ``optimizer``: whether the spec
    moves optimizer state (default: ``flag`` says so)."""
    from offloadprobe.engine.strategies import user_source
    from offloadprobe.engine.strategies.user import parse_function, parse_pair, split_spec

    if not is_user_spec(spec):
        return
    module, attr = split_spec(spec, flag)
    if "," in attr:
        functions, each = parse_pair(spec, flag, attr)
    else:
        functions, each = [parse_function(spec, flag, attr)], False
        if functions[0][1]:
            raise fail(spec, flag, f"{attr!r}: keyword arguments go with a function pair only")
    source = user_source.Source(spec, flag, module)
    optimizer = "optimizer" in flag if optimizer is None else optimizer
    what = what_is_passed("optimizer" if optimizer else "", each)
    for index, (name, kwargs) in enumerate(functions):
        if "," in attr and "." in name:
            continue  # a method reached through an object: the worker judges the object
        found = source.lookup(name)
        if isinstance(found, user_source.Function):
            if not found.plain:
                continue
            load = "," in attr and index == 1
            problem = call_problem(name, found.signature(), kwargs, what, load=load)
        elif isinstance(found, user_source.Class) and "," not in attr:
            problem = _class_problem(found, what)
        else:
            problem = None
        if problem:
            raise fail(spec, flag, problem)


def _class_problem(cls: Any, what: str) -> str | None:
    """A class's ``offload``/``load`` and its ``__init__``, as its body defines them."""
    for method in METHODS:
        found = cls.method(method)
        if found is None and cls.complete:
            return (
                f"{cls.name} lacks {method}: provide offload(...), load(...), or name two "
                "functions as package.module:offload_fn,load_fn"
            )
        if found is not None and found.plain:
            problem = call_problem(
                f"{cls.name}.{method}",
                found.signature(),
                {},
                what,
                pair=False,
                load=method == "load",
            )
            if problem:
                return problem
    init = cls.method("__init__")
    if init is not None and init.plain and cls.plain:
        return factory_problem(cls.name, init.signature())
    return None
