"""The runtime a run measures on: CUDA, or the CPU emulation of it (torch loaded lazily,
so that ``engine.runtime.eager`` and the like import without it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from offloadprobe.engine.runtime.session import Runtime, open_runtime

__all__ = ["Runtime", "open_runtime"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from offloadprobe.engine.runtime import session

        return getattr(session, name)
    if name in ("emulation", "collectives", "device_memory", "session"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
