"""The user's module read as source, never run: where it is, and what it defines.

``plan``, ``repro`` and the pytest plugin's collection check a user's spec without importing
it (the module may import torch and megatron, seconds of work in a process that imports
neither). The module's file is found as the import system would find it (every finder on
``sys.meta_path``, a parent package's search path from its spec), without running the
module or its parent packages; its top-level definitions are read with ``ast``. A name the
source binds in another way (an assignment, a conditional definition) is not judged here:
the worker imports the module and checks the object itself.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import StrategyError

_P = inspect.Parameter
_KEEPS_SIGNATURE = frozenset(
    {"no_grad", "enable_grad", "inference_mode", "cache", "lru_cache", "override", "final"}
)
"""Decorators that leave a function's parameters as they are (``functools.wraps``)."""
_DEPTH = 4
"""Re-exports followed (``from .impl import offload``) before giving up."""

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


@dataclass(frozen=True, slots=True)
class Function:
    """A ``def`` as its source writes it; ``bound``: the first parameter is filled in
    (``self`` of a method, ``cls`` of a classmethod)."""

    node: FunctionNode
    bound: bool = False

    @property
    def plain(self) -> bool:
        """No decorator that could change what it takes."""
        names = {_decorator_name(d) for d in self.node.decorator_list}
        return names <= _KEEPS_SIGNATURE | {"staticmethod", "classmethod"}

    def signature(self) -> inspect.Signature:
        """Its parameters as ``inspect.Signature`` (defaults shown as present, not valued)."""
        args = self.node.args
        ordered = [*args.posonlyargs, *args.args]
        first_default = len(ordered) - len(args.defaults)
        params = [
            _P(
                a.arg,
                _P.POSITIONAL_ONLY if i < len(args.posonlyargs) else _P.POSITIONAL_OR_KEYWORD,
                default=... if i >= first_default else _P.empty,
            )
            for i, a in enumerate(ordered)
        ]
        if args.vararg is not None:
            params.append(_P(args.vararg.arg, _P.VAR_POSITIONAL))
        params += [
            _P(a.arg, _P.KEYWORD_ONLY, default=... if d is not None else _P.empty)
            for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        ]
        if args.kwarg is not None:
            params.append(_P(args.kwarg.arg, _P.VAR_KEYWORD))
        if self.bound and params and params[0].kind is not _P.VAR_POSITIONAL:
            params = params[1:]
        return inspect.Signature(params)


@dataclass(frozen=True, slots=True)
class Class:
    """A ``class`` as its source writes it."""

    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def plain(self) -> bool:
        """No class decorator (a dataclass writes its own ``__init__``)."""
        return not self.node.decorator_list

    @property
    def complete(self) -> bool:
        """Its body is all it has: no base but ``object``, no metaclass, no decorator, no
        ``__getattr__``; a method missing from it is missing."""
        bases = all(isinstance(b, ast.Name) and b.id == "object" for b in self.node.bases)
        return bases and not self.node.keywords and self.plain and not self.method("__getattr__")

    def method(self, name: str) -> Function | None:
        found = None
        for stmt in self.node.body:
            if isinstance(stmt, FunctionNode) and stmt.name == name:
                kinds = {_decorator_name(d) for d in stmt.decorator_list}
                found = Function(stmt, bound="staticmethod" not in kinds)
        return found


class Source:
    """One module's source: found without running it, parsed once."""

    def __init__(self, spec: str, flag: str, module: str, depth: int = 0) -> None:
        self.spec, self.flag, self.module, self.depth = spec, flag, module, depth
        path, self.package = _locate(module)
        if path is None:
            raise StrategyError(
                f"{flag} {spec!r}: cannot import {module!r} (no module named {module!r}); make "
                "it importable from the current directory or PYTHONPATH"
            )
        self.tree = _parse(path, spec, flag, module)

    def lookup(self, dotted: str) -> Function | Class | None:
        """The definition ``dotted`` (``name`` or ``Class.method``) names, where the
        source shows it plainly; None where it does not (judged in the worker)."""
        if self.tree is None:
            return None
        head, *rest = dotted.split(".")
        found: Any = self._top(head)
        for part in rest:
            if not isinstance(found, Class):
                return None
            found = found.method(part) or _nested_class(found.node, part)
        return found

    def _top(self, name: str) -> Function | Class | None:
        assert self.tree is not None
        found: Function | Class | None = None
        reexport: ast.ImportFrom | None = None
        for stmt in self.tree.body:
            if isinstance(stmt, FunctionNode) and stmt.name == name:
                found, reexport = Function(stmt), None
            elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
                found, reexport = Class(stmt), None
            elif isinstance(stmt, ast.ImportFrom) and any(
                (a.asname or a.name) == name for a in stmt.names
            ):
                found, reexport = None, stmt
        if reexport is not None:
            return self._follow(reexport, name)
        if found is None and not _may_bind(self.tree, name):
            raise StrategyError(
                f"{self.flag} {self.spec!r}: module {self.module!r} has no attribute {name!r}"
            )
        return found

    def _follow(self, stmt: ast.ImportFrom, name: str) -> Function | Class | None:
        (alias,) = [a for a in stmt.names if (a.asname or a.name) == name]
        base = self.package.split(".") if stmt.level else []
        if stmt.level > 1:
            base = base[: len(base) - stmt.level + 1]
        target = ".".join([*base, *([stmt.module] if stmt.module else [])])
        if self.depth >= _DEPTH or not target:
            return None
        try:
            other = Source(self.spec, self.flag, target, self.depth + 1)
        except StrategyError:
            return None  # the import system may find it another way: the worker judges
        try:
            return other.lookup(alias.name)
        except StrategyError:
            return None  # a submodule of that name, or bound at run time


def _nested_class(node: ast.ClassDef, name: str) -> Class | None:
    found = None
    for stmt in node.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            found = Class(stmt)
    return found


def _may_bind(tree: ast.Module, name: str) -> bool:
    """Whether anything in the module could bind ``name`` at run time."""
    for node in ast.walk(tree):
        if isinstance(node, FunctionNode | ast.ClassDef) and node.name in (name, "__getattr__"):
            return True
        if isinstance(node, ast.ImportFrom | ast.Import) and any(
            a.name == "*" or (a.asname or a.name).split(".")[0] == name for a in node.names
        ):
            return True
        if isinstance(node, ast.Name) and (
            node.id == "globals" or (node.id == name and isinstance(node.ctx, ast.Store))
        ):
            return True
        if isinstance(node, ast.Global) and name in node.names:
            return True
    return False


def _locate(module: str) -> tuple[Path | None, str]:
    """The module's source file (None: not found, or no Python source to read, as for an
    extension: then ``(None, "")`` only when nothing found it at all) and its package."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as the worker finds it
    origin, locations = _find(module)
    if origin is None and locations is None:
        return None, ""
    package = module if locations is not None else module.rpartition(".")[0]
    path = Path(origin) if origin and origin.endswith(".py") else Path(os.devnull)
    return path, package


def _find(module: str) -> tuple[str | None, list[str] | None]:
    """``(origin, submodule search locations)`` as the import system would find them."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        locations = getattr(loaded, "__path__", None)
        return getattr(loaded, "__file__", None) or "", list(locations) if locations else None
    parent, _, _ = module.rpartition(".")
    path = None
    if parent:
        _, path = _find(parent)
        if path is None:
            return None, None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(module, path)
        except (ImportError, ValueError, AttributeError, TypeError):
            continue
        if spec is not None:
            locations = spec.submodule_search_locations
            return spec.origin or "", list(locations) if locations is not None else None
    return None, None


def _parse(path: Path, spec: str, flag: str, module: str) -> ast.Module | None:
    if path == Path(os.devnull):
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise StrategyError(
            f"{flag} {spec!r}: cannot import {module!r} (SyntaxError: {exc.msg}, {path.name} "
            f"line {exc.lineno}); fix the module"
        ) from None
