"""The job's end of the wire to the parent (``meter.py``): stdlib only, in every process.

``hello`` once per process (and per image: an ``execve`` closes the socket), then one
message at each call's entry and exit, each answered by the parent once it has read the
process's cgroup. The process sends no figure and names no pid: the parent reads both
itself. A parent that cannot be reached, or that does not answer within
:data:`TIMEOUT_S`, is given up for the rest of the process: its calls are then measured
by RSS alone (the collector says which), and the job runs on.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from typing import Any

TIMEOUT_S = 10.0


class MeterClient:
    """This process's connection (made again in a forked child)."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.pid = os.getpid()
        self.broken = not name

    def _connect(self) -> socket.socket | None:
        if self.broken:
            return None
        if self.sock is not None and self.pid == os.getpid():
            return self.sock
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.settimeout(TIMEOUT_S)
            sock.connect("\0" + str(self.name))
        except OSError:
            self.broken = True
            return None
        self.sock, self.pid = sock, os.getpid()
        return sock

    def _send(self, message: list[Any], *, answer: bool = True) -> bool:
        """One message and, where ``answer``, the parent's reply; False where the parent
        could not be reached (given up from then on)."""
        with self.lock:
            sock = self._connect()
            if sock is None:
                return False
            try:
                sock.send(json.dumps(message).encode())
                return not answer or sock.recv(64) == b"ok"
            except OSError:
                self.broken = True
                with contextlib.suppress(OSError):
                    sock.close()
                self.sock = None
                return False

    def hello(self) -> bool:
        return self._send(["hello"])

    def enter(self, phase: str, index: int) -> bool:
        return self._send(["enter", phase, index])

    def exit(self, phase: str, index: int) -> bool:
        return self._send(["exit", phase, index])

    def bye(self) -> None:
        if self.sock is not None and self.pid == os.getpid():
            self._send(["bye"], answer=False)

    def after_fork(self) -> None:
        """In a forked child: drop the parent's connection (its copy only: the parent's
        stays open) and connect anew at the next message."""
        self.lock = threading.Lock()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                os.close(self.sock.detach())  # the child's copy alone: no shutdown
            self.sock = None
        self.broken = not self.name
