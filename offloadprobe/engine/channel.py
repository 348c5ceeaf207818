"""The worker's side of the channel to its parent (the parent's is ``isolation.warden``).

A worker whose job names a channel connects to that UNIX socket first thing, before any
strategy code is imported, and tells its parent, one JSON line each, what the parent must
know even if the record is rewritten later or the process ends otherwise:

- ``{"mark": "start"|"end", "cycle": N, "phase": P}`` at each phase's start and end: the
  parent resets the group's peak at the start and reads it at the end;
- ``{"problems": [...]}`` for each integrity problem, as it is found (``Findings``);
- ``{"result": {...}}``, the worker's result, when it writes its record file;
- ``{"done": true}`` before it returns.

Each line waits for the parent's acknowledgement, so the worker goes on only once the
parent holds the fact (and, at a start mark, has reset the peak). Where the parent does
not answer within ``ACK_TIMEOUT_S`` the channel is dropped and the worker goes on: the
parent then finds facts missing, and the record is judged ``inconsistent``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
from collections.abc import Iterable
from typing import Any

from offloadprobe.measure.threshold_sync import check_thresholds_now

ACK = b"\n"
ACK_TIMEOUT_S = 60.0


@functools.cache
def _on_v1() -> bool:
    """Whether this process's memory cgroup is a v1 one (thresholds are v1's)."""
    from offloadprobe.measure.cgroup import own_group

    group = own_group()
    return group is not None and group.version == 1


class ParentChannel:
    """A connected channel; every ``send`` waits for the parent's acknowledgement."""

    def __init__(self, sock: socket.socket | None, *, owns_peaks: bool = False) -> None:
        self._sock = sock
        self.owns_peaks = owns_peaks and sock is not None
        """The parent resets and reads the group's peak at the marks: the worker must
        not reset it itself (``measure.probes.cgroup``)."""

    @classmethod
    def connect(cls, path: str, *, owns_peaks: bool = False) -> ParentChannel:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(ACK_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            return cls(None)
        return cls(sock, owns_peaks=owns_peaks)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def send(self, message: dict[str, Any]) -> bool:
        """One line to the parent and its acknowledgement; False where the channel broke."""
        if self._sock is None:
            return False
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
            if self._sock.recv(1) == ACK:
                return True
        except (OSError, ValueError):
            pass
        self.close()
        return False

    def mark(self, event: str, cycle: int, phase: str) -> None:
        if event == "start" and self.owns_peaks and _on_v1():
            check_thresholds_now()  # what came before is no phase's (``threshold_sync``)
        self.send({"mark": event, "cycle": cycle, "phase": phase})

    def problems(self, lines: list[str]) -> None:
        if lines:
            self.send({"problems": lines})

    def result(self, data: dict[str, Any]) -> None:
        self.send({"result": data})

    def done(self) -> None:
        self.send({"done": True})
        self.close()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


class Findings(list[str]):
    """A run's integrity problems: each one told to the parent as it is added."""

    def __init__(self, channel: ParentChannel | None = None) -> None:
        super().__init__()
        self.channel = channel

    def append(self, line: str) -> None:
        super().append(line)
        self._tell([line])

    def extend(self, lines: Iterable[str]) -> None:
        added = list(lines)
        super().extend(added)
        self._tell(added)

    def __iadd__(self, lines: Iterable[str]) -> Findings:  # type: ignore[override,misc]
        self.extend(lines)
        return self

    def _tell(self, lines: list[str]) -> None:
        if self.channel is not None:
            self.channel.problems(lines)
