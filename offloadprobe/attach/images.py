"""Which program image a process runs, read from outside it (the parent's side).

``execve`` keeps a process's pid, its start time and often its command line (a job that
re-executes itself), so none of those tells one image from the next. What the kernel
makes new at every ``execve`` is the process's memory: its stack, and on it the 16 random
bytes it hands the program (``AT_RANDOM`` in the auxiliary vector), drawn afresh with or
without address randomisation. ``image_of`` reads those bytes through ``/proc/PID/mem``
(the parent may: it started the job), else the stack and argument addresses of
``/proc/PID/stat`` (new per image where addresses are randomised), else nothing.

A forked child shares its parent's image until it executes one of its own: the same
token under another pid. The token is read twice around the bytes; a process that
executes a new image mid-read reads as unknown (None) for that look.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

AT_RANDOM = 25
_WORD = struct.calcsize("Q")


@dataclass(frozen=True, slots=True)
class Image:
    """One program image of one process."""

    started: int
    """The process's start time (clock ticks since boot): the same pid reused is another."""
    token: str
    """What differs between two images (``random:...`` or ``stack:...``)."""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = text.rpartition(")")[2].split()
    return rest if len(rest) > 48 else None


def _at_random(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/auxv", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    words = struct.unpack(f"{len(raw) // _WORD}Q", raw[: len(raw) // _WORD * _WORD])
    for key, value in zip(words[::2], words[1::2], strict=False):
        if key == AT_RANDOM:
            return int(value)
    return None


def _random_bytes(pid: int, address: int) -> bytes | None:
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.pread(fd, 16, address)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == 16 else None


def started_of(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None where it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def exiting(pid: int) -> bool:
    """Whether ``pid`` is gone or on its way out: a zombie, or a process whose memory is
    already released (the kernel moves an exiting process to the root cgroup after
    that: such a one has not escaped)."""
    fields = _stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X") or fields[20] == "0"


def image_of(pid: int) -> Image | None:
    """The image ``pid`` runs now, or None where it cannot be told (gone, not readable,
    or executing a new image while it was read)."""
    first = _stat_fields(pid)
    if first is None:
        return None
    # stat fields after the command, 0-based: 19 starttime, 25 startstack, 45..48 the
    # argument and environment addresses (0 where the reader may not see them)
    addresses = (first[25], first[45], first[46], first[47], first[48])
    address = _at_random(pid)
    data = _random_bytes(pid, address) if address else None
    again = _stat_fields(pid)
    if again is None or again[19] != first[19]:
        return None
    if (again[25], again[45], again[46], again[47], again[48]) != addresses:
        return None  # a new image between the two reads
    if data is not None and _at_random(pid) == address:
        return Image(started=int(first[19]), token=f"random:{data.hex()}")
    if any(a != "0" for a in addresses):
        return Image(started=int(first[19]), token="stack:" + ",".join(addresses))
    return None
