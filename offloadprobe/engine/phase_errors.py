"""What an exception raised inside a measured phase means: a typed failure, no guessing.

A device out-of-memory error (real, or judged by the CPU emulation's device limit) is
``out of memory``; a phase the CPU emulation cannot measure and any other exception are
``crashed``. The message is one line; the traceback of an unexpected exception goes to
the measured process's stderr, which the parent shows framed after the verdict.
"""

from __future__ import annotations

import sys
import traceback

from offloadprobe.core.errors import DeviceOutOfMemory
from offloadprobe.core.outcomes import Failure


class EmulationBypassed(RuntimeError):
    """A strategy changed device memory where CPU emulation cannot account for it."""


def check_bypass(memory: object, bypassed_before: int, phase: str) -> None:
    """Raise :class:`EmulationBypassed` where a phase other than training resized device
    storages behind the emulated device's registry (``memory``: None on CUDA)."""
    bypassed = getattr(memory, "bypassed_bytes", 0) if memory is not None else 0
    if bypassed > bypassed_before and phase != "train":
        from offloadprobe.core.units import format_bytes

        raise EmulationBypassed(
            f"CPU emulation cannot measure this phase: {format_bytes(bypassed - bypassed_before)} "
            "of device storage were resized outside torch.UntypedStorage.resize_ "
            "(torch._C.StorageBase.resize_ or an op's out=); on a GPU it is measured"
        )


def _is_torch_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(exc, torch.OutOfMemoryError)


def phase_failure(exc: BaseException, cycle: int, phase: str) -> Failure:
    """The failure ``exc`` stands for, raised in ``phase`` of ``cycle``."""
    if isinstance(exc, DeviceOutOfMemory):
        return Failure(kind="out of memory", message=str(exc), cycle=cycle, phase=phase)
    if isinstance(exc, EmulationBypassed):  # cannot be measured here: no traceback
        return Failure(kind="crashed", message=str(exc), cycle=cycle, phase=phase)
    if _is_torch_oom(exc):
        first = str(exc).splitlines()[0] if str(exc) else "torch.OutOfMemoryError"
        if "out of memory" not in first.lower():
            first = f"CUDA out of memory: {first}"
        return Failure(kind="out of memory", message=first, cycle=cycle, phase=phase)
    traceback.print_exception(exc, file=sys.stderr)
    message = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return Failure(kind="crashed", message=message, cycle=cycle, phase=phase)


def setup_failure(exc: BaseException) -> Failure:
    """The run failed before its first phase (building the model, its strategies or the
    no-offload reference run): out of memory, or a crash."""
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, DeviceOutOfMemory) or _is_torch_oom(exc):
        return Failure(kind="out of memory", message=first, phase="setup")
    traceback.print_exception(exc, file=sys.stderr)
    return Failure(kind="crashed", message=f"{type(exc).__name__}: {first}", phase="setup")
