"""The cyclic garbage collector around a process's imports.

Importing torch and megatron-core makes about a million objects; at Python's default
thresholds the cyclic collector walks the growing heap some 950 times on the way (0.7 CPU-s
of every process and rank). The CLI's entry point raises the youngest generation's
threshold from 700 to ``IMPORT_THRESHOLD`` allocations before it imports anything: the
imports' garbage is still collected as they go, a few dozen times instead. Wherever the
process then starts its real work (a run's runtime, the ranks' launcher, a parent waiting
for its children), ``resume`` collects once and puts the thresholds back, so that a run
collects as training does. With ``freeze`` it also freezes what survived (it lives as long
as the process; no collection walks it again): what CPU emulation does at a run's start
anyway (``cuda_shims.long_lived_objects_frozen``). Only a change made here is undone: a
caller that set the collector up itself keeps its settings.
"""

from __future__ import annotations

import gc

IMPORT_THRESHOLD = 20_000
"""Allocations between two collections of the youngest generation while paused."""

_saved: tuple[int, ...] | None = None
_frozen = False
"""Whether objects were frozen through this module (``gc.get_freeze_count`` walks every
frozen object, some 40 ms once torch is imported: asked around every run, it added up)."""


def frozen() -> bool:
    """Whether anything is frozen: through this module, or (asked only when not) by
    anyone else."""
    return _frozen or gc.get_freeze_count() > 0


def freeze_objects() -> None:
    """``gc.freeze``, remembered (``frozen``)."""
    global _frozen
    gc.freeze()
    _frozen = True


def unfreeze_objects() -> None:
    """``gc.unfreeze``: nothing frozen any more."""
    global _frozen
    gc.unfreeze()
    _frozen = False


def pause_for_imports() -> None:
    """Collect seldom until ``resume`` (the process's own entry point). Nothing changes
    where automatic collection is off."""
    global _saved
    if gc.isenabled() and _saved is None:
        _saved = gc.get_threshold()
        gc.set_threshold(IMPORT_THRESHOLD, *_saved[1:])


def resume(*, freeze: bool = True) -> None:
    """Undo ``pause_for_imports``: collect what the imports left, freeze what survived
    (with ``freeze``, unless something is frozen already) and put the thresholds back. A
    no-op when nothing was paused here."""
    global _saved
    if _saved is None:
        return
    gc.collect()
    if freeze and not frozen():
        freeze_objects()
    end_pause()


def end_pause() -> None:
    """Put the thresholds back without collecting: the entry point's exit, for a command
    that never started real work (``plan``)."""
    global _saved
    if _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None


def paused() -> bool:
    """Whether ``pause_for_imports`` is in force."""
    return _saved is not None
