"""The cyclic garbage collector around a process's imports.

Importing torch and megatron-core makes about a million objects; on the way the cyclic
collector walks the growing heap some 950 times (0.7 CPU-s of every process and rank).
The CLI's entry point pauses automatic collection before it imports anything. Wherever the
process then starts its real work (a run's runtime, the ranks' launcher, a parent waiting
for its children), ``resume`` freezes what the imports made (it lives as long as the
process; frozen, no collection walks it again) and turns collection back on, so that a run
collects as training does. Only a pause made here is undone: a caller that turned the
collector off itself keeps it off.
"""

from __future__ import annotations

import gc

_paused = False


def pause_for_imports() -> None:
    """Turn automatic collection off until ``resume`` (the process's own entry point)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Undo ``pause_for_imports``: freeze what exists (unless something is frozen already)
    and collect automatically again. A no-op when nothing was paused here."""
    global _paused
    if not _paused:
        return
    _paused = False
    if gc.get_freeze_count() == 0:
        gc.freeze()  # import-time garbage among it stays, as it would have with collection off
    gc.enable()


def paused() -> bool:
    """Whether automatic collection is paused by ``pause_for_imports``."""
    return _paused
