"""One registry per kind of plug-in: names to descriptors, with entry-point discovery.

Built-in plug-ins are registered by module path and imported only when asked for, so
listing names (``--help``, the scenario schema) imports no torch. Each such module
exports its descriptor as ``STRATEGY``. Third parties add theirs through an entry-point
group; the entry point may name a descriptor or a bare class, which ``adapt`` wraps.

A name is registered once: a built-in and an entry point of the same name, or two entry
points of one name, are an error that names both (exit 2), never a silent choice.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

from offloadprobe.core.errors import StrategyError

T = TypeVar("T")

DESCRIPTOR_ATTRIBUTE = "STRATEGY"
"""The name under which a plug-in module exports its descriptor."""

USER_FORMS = ("package.module:object", "package.module:offload_fn,load_fn[@each]")
"""The two ways to name the user's own code instead of a registered name."""


def is_user_spec(spec: str) -> bool:
    """True for a user's ``package.module:...`` spec, False for a registered name."""
    return ":" in spec


def _origin(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    where = f" (distribution {dist.name} {dist.version})" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value}{where}"


class Registry(Generic[T]):
    """Named descriptors of one kind; built-ins by module path, third parties by entry point."""

    def __init__(
        self,
        kind: str,
        entry_point_group: str,
        adapt: Callable[[str, Any], T],
        *,
        attribute: str = DESCRIPTOR_ATTRIBUTE,
        user_forms: tuple[str, ...] = USER_FORMS,
    ) -> None:
        self.kind = kind
        self.user_forms = user_forms
        """How a user names their own instead of a registered name; () for none."""
        self.entry_point_group = entry_point_group
        self._adapt = adapt
        self.attribute = attribute
        """The name under which a built-in module exports its plug-in."""
        self._modules: dict[str, str] = {}
        self._entry_points: dict[str, Any] = {}
        self._loaded: dict[str, T] = {}
        self._discovered = False

    def register_module(self, name: str, module: str) -> None:
        """Register the descriptor ``module.STRATEGY`` under ``name`` (imported on first use)."""
        if name in self._modules and self._modules[name] != module:
            raise StrategyError(
                f"{self.kind} {name!r} is registered twice: built-in {self._modules[name]} "
                f"and {module}"
            )
        self._modules[name] = module

    def module_of(self, name: str) -> str | None:
        """The module a built-in name is registered by (None for any other name)."""
        return self._modules.get(name)

    def register_package(
        self, package: str, folder: Path, first: tuple[str, ...] = (), of: str | None = None
    ) -> None:
        """Register every module in ``folder`` (the package ``package``) that assigns the
        registry's attribute (``STRATEGY``, ``REPORTER``) at its top level, found by reading
        its text (nothing is imported); listed with ``first``'s names first, then the rest
        by name. A new built-in plug-in is its module alone. ``of``: only modules whose
        assignment calls this name (``ModelStrategyInfo``), where one package holds
        plug-ins of two registries."""
        kind = rf"\s*{re.escape(of)}\(" if of else ""
        declares = re.compile(rf"^{re.escape(self.attribute)}\s*(:[^=]*)?={kind}", re.M)
        found = [
            path.stem
            for path in sorted(folder.glob("*.py"))
            if path.stem != "__init__" and declares.search(path.read_text(encoding="utf-8"))
        ]
        order = {name: i for i, name in enumerate(first)}
        for name in sorted(found, key=lambda n: (order.get(n, len(order)), n)):
            self.register_module(name, f"{package}.{name}")

    def _discover(self) -> None:
        if self._discovered:
            return
        found: dict[str, Any] = {}
        for ep in metadata.entry_points(group=self.entry_point_group):
            if ep.name in self._modules:
                raise StrategyError(
                    f"{self.kind} {ep.name!r} is registered twice: built-in "
                    f"{self._modules[ep.name]} and {_origin(ep)}; rename the plug-in's "
                    "entry point or uninstall it"
                )
            if ep.name in found and found[ep.name].value != ep.value:
                raise StrategyError(
                    f"{self.kind} {ep.name!r} is registered twice: {_origin(found[ep.name])} "
                    f"and {_origin(ep)}; uninstall one of them or rename its entry point"
                )
            found[ep.name] = ep
        self._entry_points = found
        self._discovered = True

    def refresh(self) -> None:
        """Forget discovered entry points, e.g. after a plug-in was installed in this process."""
        self._discovered = False
        self._entry_points.clear()
        for name in [n for n in self._loaded if n not in self._modules]:
            del self._loaded[name]

    def names(self) -> list[str]:
        """Registered names, built-ins first; imports no plug-in module."""
        self._discover()
        return [*self._modules, *self._entry_points]

    def builtin_names(self) -> list[str]:
        return list(self._modules)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def check(self, name: str) -> None:
        """Fail on a name that is not registered, as ``get`` would; imports no plug-in. A
        user's ``package.module:object`` passes: it is checked when it is loaded."""
        if (not self.user_forms or not is_user_spec(name)) and name not in self.names():
            raise self._unknown(name)

    def choices(self) -> str:
        """Every registered name and the user forms, for help texts and errors."""
        names = ", ".join(self.names())
        return names + ", or your own " + " or ".join(self.user_forms) if self.user_forms else names

    def near(self, name: str) -> tuple[str, float] | None:
        """The registered name closest to ``name`` and how close (difflib's ratio, at
        least 0.6), or None."""
        near = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.6)
        if not near:
            return None
        return near[0], difflib.SequenceMatcher(None, name, near[0]).ratio()

    def _unknown(self, name: str) -> StrategyError:
        near = self.near(name)
        module, dot, obj = name.rpartition(".")
        if near:
            hint = f" (did you mean {near[0]!r}?)"
        elif dot and module and obj and self.user_forms:
            hint = f" (did you mean {module}:{obj}? a colon separates the module from the object)"
        elif not self.user_forms:  # a closed set (engines): every name is a suggestion
            return StrategyError(
                f"unknown {self.kind} {name!r} (did you mean one of {self.choices()}?)"
            )
        else:
            hint = ""
        return StrategyError(f"unknown {self.kind} {name!r}{hint}: choose one of {self.choices()}")

    def get(self, name: str) -> T:
        """The descriptor for ``name``; an unknown name lists the valid ones."""
        self._discover()
        if name in self._loaded:
            return self._loaded[name]
        if name in self._modules:
            module = importlib.import_module(self._modules[name])
            found = self._adapt(name, getattr(module, self.attribute))
        elif name in self._entry_points:
            ep = self._entry_points[name]
            try:
                found = self._adapt(name, ep.load())
            except Exception as exc:  # a third party's module may fail in any way
                raise StrategyError(
                    f"{self.kind} {name!r} from {ep.value}: cannot load "
                    f"({type(exc).__name__}: {exc}); reinstall the package that provides it"
                ) from None
        else:
            raise self._unknown(name)
        self._loaded[name] = found
        return found

    def entries(self) -> list[T]:
        """Every descriptor (imports every plug-in)."""
        return [self.get(name) for name in self.names()]
