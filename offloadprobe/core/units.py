"""Byte sizes and rates: parsed and formatted at the edges only.

Inside offloadprobe every size is an ``int`` of bytes. Binary units (KiB, MiB,
GiB, TiB) are powers of 1024; decimal units (KB, MB, GB, TB) are powers of 1000.
Bandwidth is reported in decimal GB/s, as copy engines and PCIe are specified.
"""

from __future__ import annotations

import re

from offloadprobe.core.errors import UsageError

_UNITS = {
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


class MissingUnit(UsageError):
    """A size given as a bare number: bytes to some, MiB or GiB to others, so refused."""


def parse_size(text: str, *, what: str = "size", allow_zero: bool = False) -> int:
    """Parse ``"512MiB"``, ``"5GiB"``, ``"1.5GB"`` or ``"2048B"`` into bytes.

    A bare number is refused (``MissingUnit``): ``--payload 16`` read as 16 bytes made a
    run that measured nothing, ``--host-limit 4`` one that was OOM-killed at once. Only
    ``0``, where ``allow_zero``, needs no unit. Code that has bytes holds an ``int`` and
    does not call this.
    """
    match = _SIZE.match(str(text))
    if match and float(match.group(1)) == 0:
        if allow_zero:
            return 0
        raise UsageError(f"{what} {text!r} must be positive")
    if match and not match.group(2):
        number = match.group(1)
        raise MissingUnit(f"{what} {number} has no unit: give a unit, e.g. {number}MiB")
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise UsageError(
            f"cannot parse {what} {text!r}: use a number with a unit, e.g. 512MiB, 5GiB or 2GB"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{what} {text!r} must be positive")
    return value


def format_bytes(n: int | None) -> str:
    """Render bytes with a binary unit: ``5368709120`` -> ``"5.00 GiB"``."""
    if n is None:
        return "n/a"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{n} B"


def format_ratio(x: float | None) -> str:
    """Render a multiple of the payload: ``2.6`` -> ``"2.60x"``."""
    return "n/a" if x is None else f"{x:.2f}x"


def format_gbps(x: float | None) -> str:
    """Render a decimal GB/s rate."""
    return "n/a" if x is None else f"{x:.1f} GB/s"


def gbps(nbytes: int, seconds: float) -> float | None:
    """Bytes over seconds as decimal GB/s; None when nothing moved or no time passed."""
    if nbytes <= 0 or seconds <= 0:
        return None
    return nbytes / seconds / 1e9
