"""The modules every run imports, imported at once when a runtime opens.

A run would otherwise import them lazily, in the middle of its first phases: torch's
compiler stack on the first optimizer step, the engine's model, wrappers, optimizer and
schedules when the model is built (megatron-core's: ``EngineInfo.preload``). Imported up
front, they are imported while the CLI's collector pause is in force
(``core/collector.py``), and in CPU emulation their objects are frozen with the rest of
the long-lived ones (``cuda_shims.long_lived_objects_frozen``). A process imports one
engine's: the first runtime it opens names it, later calls without a name reuse it.
"""

from __future__ import annotations

import importlib

from offloadprobe.core.engines import DEFAULT_ENGINE, engine

BASE_IMPORTS = ("torch._dynamo",)
"""torch.optim's step imports it (about 90 modules, 50,000 objects)."""
_ENGINE = [DEFAULT_ENGINE]


def run_imports(name: str | None = None) -> tuple[str, ...]:
    """What a run of engine ``name`` imports up front (this process's engine if None)."""
    return BASE_IMPORTS + engine(name or _ENGINE[0]).preload


def import_run_modules(name: str | None = None) -> None:
    """Import every module of ``run_imports(name)`` (a no-op once they are)."""
    if name is not None:
        _ENGINE[0] = name
    for module in run_imports():
        importlib.import_module(module)
