"""One registry per kind of plug-in: names to factories, with entry-point discovery."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Generic, TypeVar

from offloadprobe.core.errors import StrategyError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Entry(Generic[T]):
    """A registered plug-in: its factory and a one-line description."""

    name: str
    factory: Callable[..., T]
    summary: str


class Registry(Generic[T]):
    """Named factories of one kind; third parties add theirs through an entry-point group."""

    def __init__(self, kind: str, entry_point_group: str) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._entries: dict[str, Entry[T]] = {}
        self._discovered = False

    def register(self, name: str, summary: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: register ``factory`` under ``name``."""

        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            self._entries[name] = Entry(name, factory, summary)
            return factory

        return decorate

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for ep in metadata.entry_points(group=self.entry_point_group):
            if ep.name not in self._entries:
                self._entries[ep.name] = Entry(ep.name, ep.load(), f"from {ep.value}")

    def names(self) -> list[str]:
        """Registered names, built-ins first."""
        self._discover()
        return list(self._entries)

    def entries(self) -> list[Entry[T]]:
        self._discover()
        return list(self._entries.values())

    def get(self, name: str) -> Entry[T]:
        """The entry for ``name``; an unknown name lists the valid ones."""
        self._discover()
        if name not in self._entries:
            valid = ", ".join(self._entries)
            module, dot, obj = name.rpartition(".")
            hint = (
                f" (did you mean {module}:{obj}? a colon separates the module from the object)"
                if dot and module and obj
                else ""
            )
            raise StrategyError(
                f"unknown {self.kind} {name!r}: choose one of {valid}, "
                f"or give your own as package.module:object{hint}"
            )
        return self._entries[name]
