"""The wrapper around one named function: measure the call, change nothing else.

Arguments, return value and exceptions pass through as they are. A call that raises is
recorded (``raised``, the exception's type) and the same exception object is re-raised
with the wrapper's own frame taken out of its traceback, so the job's traceback reads as
it would without ``attach``. Anything the measurement itself raises is swallowed: the
call then runs unmeasured rather than fail the job. Outside an attach session (no job
file in this process) the wrapper calls straight through.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

MARK = "__offloadprobe_phase__"
"""Set on every wrapper: the phase it records (a function is never wrapped twice)."""


def current_session() -> Any:
    runtime = sys.modules.get("offloadprobe.attach.runtime")
    return None if runtime is None else runtime.SESSION


def make_wrapper(fn: Any, phase: str, target: str) -> Any:
    """A function that records every call of ``fn`` as one call of ``phase``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        session = current_session()
        if session is None:
            return fn(*args, **kwargs)
        frame = session.begin(phase, target)
        if frame is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:
            session.end(frame, error)
            tb = error.__traceback__
            if tb is not None and tb.tb_frame is sys._getframe(0):
                error.__traceback__ = tb.tb_next
            del tb
            raise
        session.end(frame, None)
        return result

    try:
        functools.update_wrapper(wrapper, fn)
    except (AttributeError, TypeError):  # a builtin without some of the attributes
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    setattr(wrapper, MARK, phase)
    return wrapper
