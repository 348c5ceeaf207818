"""``offloadprobe.phase``: name a phase in a framework's own code.

``with offloadprobe.phase("offload"): ...`` and ``@offloadprobe.phase("load")`` record one
call each, into the same stream and with the same figures as a wrapped function, when
the process runs under ``offloadprobe attach``. Outside attach they do nothing and cost
well under a microsecond (``benchmarks/attach_overhead.py`` measures it): this module
imports nothing, and it looks the session up only in ``sys.modules``, so it never
starts one (the bootstrap does).

Nested and re-entered blocks are measured each over their own window (see
``probe.py``). A block whose body raises is recorded as raised; the exception passes
through unchanged.
"""

from __future__ import annotations

import functools
import sys

_TARGET = "offloadprobe.phase"


_MODULES = sys.modules
_RUNTIME = "offloadprobe.attach.runtime"


def _session() -> object:
    runtime = _MODULES.get(_RUNTIME)
    return None if runtime is None else runtime.SESSION


class phase:
    """A named phase: a context manager, or a decorator of a function."""

    __slots__ = ("_frames", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._frames: list[object] | None = None

    def __enter__(self) -> phase:
        runtime = _MODULES.get(_RUNTIME)  # inline: this is the whole cost outside attach
        session = None if runtime is None else runtime.SESSION
        if session is not None:
            frame = session.begin(self.name, _TARGET)
            if self._frames is None:
                self._frames = []
            self._frames.append((session, frame))
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
        if self._frames:
            session, frame = self._frames.pop()
            if frame is not None:
                session.end(frame, error)
        return False

    def __call__(self, fn: object) -> object:
        name = self.name

        @functools.wraps(fn)
        def measured(*args: object, **kwargs: object) -> object:
            session = _session()
            if session is None:
                return fn(*args, **kwargs)
            with phase(name):
                return fn(*args, **kwargs)

        return measured
