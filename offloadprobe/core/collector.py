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
    if freeze and gc.get_freeze_count() == 0:
        gc.freeze()
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
