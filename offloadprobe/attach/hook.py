"""Wrap each named function as soon as its module is imported, in this process.

``install`` puts a finder first on ``sys.meta_path``. It finds nothing itself: for a
target module it asks the finders behind it for the module's spec and hooks that spec's
loader, so that right after the module's code has run (before the ``import`` statement
that asked for it returns) the named functions are replaced by wrappers. A target
module imported before ``install`` is patched at once.

What is caught, and what is not (docs/attach.md says the same to users):

* every call through the module attribute (``m.f(...)``), and every ``from m import f``
  executed after ``m`` was imported: that binds the wrapper;
* ``Class.method``: the class attribute is replaced, so every call through an instance
  or the class is caught, in subclasses that do not override it too; a ``staticmethod``
  or ``classmethod`` stays one;
* references to the original function bound before the wrap (``from m import f`` run
  before the bootstrap, or inside a circular import while ``m`` was half done): every
  module's globals are searched for the original object when it is wrapped and it is
  replaced there (``rebound`` in the record); modules imported later are searched too,
  when the next import starts (a module's globals as they are at that moment);
* NOT caught: a reference to the original held anywhere but a module's globals (a
  closure cell, a default argument, a class attribute of another class, a list or a
  dict, ``functools.partial``), a method bound to an instance before the wrap
  (``step = obj.offload_to_cpu``), a subclass that overrides the method, and calls made
  from C or C++ code that never look the name up (a C extension's own function calls);
  a function whose code is a generator or coroutine is not wrapped (``skipped``: its
  call returns at once, the work runs later).
"""

from __future__ import annotations

import sys
import threading
import types
from itertools import islice
from typing import Any

from offloadprobe.attach import protocol
from offloadprobe.attach.wrap import MARK, make_wrapper

_GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coro, async gen


class Hook:
    """The targets of this process and the meta-path finder that wraps them."""

    def __init__(self, phases: list[dict[str, Any]], record: Any) -> None:
        self.record = record
        """``record(kind, **fields)``: where the hook reports what it did."""
        self.pending: dict[str, list[dict[str, Any]]] = {}
        for phase in phases:
            self.pending.setdefault(phase["module"], []).append(phase)
        self.originals: dict[int, tuple[Any, Any]] = {}
        """id(original function) -> (original, wrapper): kept alive, so ids stay unique."""
        self.lock = threading.RLock()
        self._seen = 0
        self._busy: set[str] = set()
        self._deferred: list[types.ModuleType] = []
        """Target modules the sweep found still executing: looked at again next time."""

    # ---------------------------------------------------------------- the finder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        self.sweep()
        if fullname not in self.pending or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(fullname)
        if spec is not None and spec.loader is not None:
            self._hook_loader(spec.loader)
        return spec

    def _hook_loader(self, loader: Any) -> None:
        """Patch after the loader's ``exec_module`` (once per loader object). A loader that
        refuses an attribute is left alone: the next sweep patches its module instead."""
        if getattr(loader, "__offloadprobe_hooked__", False):
            return
        original = getattr(loader, "exec_module", None)
        if original is None:
            return

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            if module.__name__ in self.pending:
                self.patch(module)

        try:
            loader.exec_module = exec_module
            loader.__offloadprobe_hooked__ = True
        except (AttributeError, TypeError):
            return

    def invalidate_caches(self) -> None:
        return None

    # ---------------------------------------------------------------- patching

    def patch_loaded(self) -> None:
        """Patch the target modules already imported (at install)."""
        for name in list(self.pending):
            module = sys.modules.get(name)
            if module is not None:
                self.patch(module)

    def patch(self, module: types.ModuleType) -> None:
        """Wrap every pending target of ``module``; then search all modules' globals for
        the originals."""
        with self.lock:
            specs = self.pending.pop(module.__name__, [])
            wrapped = [w for w in (self._wrap(module, spec) for spec in specs) if w]
        for spec, original, wrapper in wrapped:
            rebound = self._rebind(original, wrapper, sys.modules.values())
            self.record(protocol.WRAPPED, phase=spec["name"], target=_target(spec), rebound=rebound)

    def _wrap(self, module: types.ModuleType, spec: dict[str, Any]) -> Any:
        parts = spec["qualname"].split(".")
        owner: Any = module
        for depth, part in enumerate(parts[:-1]):
            if not hasattr(owner, part):
                where = ".".join([module.__name__, *parts[:depth]])
                return self._skip(spec, f"{where} has no {part}{_nearest(part, owner)}")
            owner = getattr(owner, part)
        name = parts[-1]
        raw, rewrap = _member(owner, name)
        if raw is None:
            where = ".".join([module.__name__, *parts[:-1]])
            return self._skip(spec, f"{where} has no {name}{_nearest(name, owner)}")
        fn = getattr(raw, "__func__", raw) if rewrap is not None else raw
        if isinstance(fn, type) or not callable(fn):
            return self._skip(spec, f"{spec['qualname']} is not a function or method")
        if getattr(fn, MARK, None) is not None:
            return self._skip(spec, f"{spec['qualname']} is wrapped already")
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_flags & _GENERATOR_FLAGS:
            return self._skip(spec, f"{spec['qualname']} is a generator or coroutine function")
        wrapper = make_wrapper(fn, spec["name"], _target(spec))
        setattr(owner, name, rewrap(wrapper) if rewrap is not None else wrapper)
        self.originals[id(fn)] = (fn, wrapper)
        return spec, fn, wrapper

    def _skip(self, spec: dict[str, Any], reason: str) -> None:
        self.record(protocol.SKIPPED, phase=spec["name"], target=_target(spec), reason=reason)

    @staticmethod
    def _rebind(original: Any, wrapper: Any, modules: Any) -> int:
        """Replace ``original`` by ``wrapper`` in the globals of ``modules``."""
        count = 0
        for module in list(modules):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            try:
                for key, value in list(namespace.items()):
                    if value is original:
                        namespace[key] = wrapper
                        count += 1
            except Exception:  # a module that changes under us, an odd namespace
                continue
        return count

    def sweep(self) -> None:
        """Modules added since the last look: patch a target module that was imported
        some other way, and rebind originals found in their globals."""
        count = len(sys.modules)
        new = count - self._seen
        self._seen = count
        if (new <= 0 and not self._deferred) or not (self.originals or self.pending):
            return
        with self.lock:
            try:
                fresh = list(islice(reversed(sys.modules.values()), max(new, 0)))
            except RuntimeError:  # another thread imported meanwhile: look at them all
                fresh = list(sys.modules.values())
            candidates, self._deferred = self._deferred + fresh, []
            for module in candidates:
                if getattr(module, "__name__", None) not in self.pending:
                    continue
                if _initializing(module):  # its code is still running: not yet
                    self._deferred.append(module)
                else:
                    self.patch(module)
            for original, wrapper in list(self.originals.values()):
                self._rebind(original, wrapper, fresh)

    def still_pending(self) -> list[dict[str, Any]]:
        """Targets whose module this process never imported."""
        return [spec for specs in self.pending.values() for spec in specs]


def _nearest(name: str, owner: Any) -> str:
    """``; did you mean X?`` for the names of ``owner`` closest to a misspelt ``name``
    (or nothing); only where a target is missing, so difflib is imported then alone."""
    import difflib

    try:
        names = [n for n in dir(owner) if not n.startswith("__")]
    except Exception:
        return ""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _initializing(module: types.ModuleType) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _target(spec: dict[str, Any]) -> str:
    return f"{spec['module']}:{spec['qualname']}"


def _member(owner: Any, name: str) -> tuple[Any, Any]:
    """(the attribute, how to wrap it back): a class member is read from the class's MRO
    dicts (so a staticmethod or classmethod is seen as one); a module member as is."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                raw = klass.__dict__[name]
                if isinstance(raw, staticmethod):
                    return raw, staticmethod
                if isinstance(raw, classmethod):
                    return raw, classmethod
                return raw, None
        return None, None
    return getattr(owner, name, None), None


def install(phases: list[dict[str, Any]], record: Any) -> Hook:
    """Put the hook first on ``sys.meta_path`` and patch what is imported already."""
    hook = Hook(phases, record)
    sys.meta_path.insert(0, hook)  # type: ignore[arg-type]
    hook.patch_loaded()
    hook._seen = len(sys.modules)
    return hook
