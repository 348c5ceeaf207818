"""One exception tree for offloadprobe; the CLI and the pytest plugin translate it.

Exit codes: 2 for input the user can fix (``UsageError``), 1 for a run that
measured something wrong (``IntegrityError``, ``NotOffloaded``, ``BudgetExceeded``, a mismatch with
a scenario's expectation).
"""

from __future__ import annotations


class OffloadProbeError(Exception):
    """Root of every error offloadprobe raises on purpose."""

    exit_code = 1
    kind = "crashed"
    """The verdict kind (``core.records.VERDICT_KINDS``) a child that raised it gets."""


class UsageError(OffloadProbeError):
    """Bad input: a flag value, a scenario, a missing device, a user plug-in."""

    kind = "bad input"

    exit_code = 2


class DeviceUnavailable(UsageError):
    """The requested device is not present on this host."""


class StrategyError(UsageError):
    """A strategy name is unknown or a user strategy cannot be loaded."""


class IntegrityError(OffloadProbeError):
    """A round trip changed data: the strategy lost or corrupted bytes."""

    kind = "corrupted"


class NotOffloaded(OffloadProbeError):
    """A model strategy's offload left ``param_data`` storage on the device."""

    kind = "not offloaded"


class DeviceOutOfMemory(OffloadProbeError):
    """A phase ran out of device memory (real, or judged in CPU emulation)."""

    kind = "out of memory"


class BudgetExceeded(OffloadProbeError):
    """At least one measured value broke a memory or bandwidth budget."""

    kind = "over budget"


class ExpectationMismatch(OffloadProbeError):
    """A scenario's outcome differs from what the scenario file expects."""

    kind = "crashed"


class RowsFailed(OffloadProbeError):
    """At least one row's verdict is not ok (crashed, killed, corrupted, not offloaded,
    out of memory, over budget); each row's verdict says which."""

    kind = "crashed"
