"""The parent's end of the wire to the job's processes: who they are, and their cgroup
around each call, read by the parent while the call waits.

One thread serves a Unix socket in the abstract namespace (nothing on disk), named in the
job file. The kernel says which process is at the other end of each connection
(``SO_PEERCRED``); nothing the process sends names it. A process that loads the
bootstrap says ``hello``: the parent reads which image it runs (``images.py``), keeps
that as instrumented, and moves it into a group of its own (``groups.py``). At each
call's entry and exit the process sends one message and waits for the answer; meanwhile
the parent reads the process's group: its usage at entry and exit, and its peak over the
call (the page cache, subtracted from both to give held bytes, and the job group's
figures are read just after the answer). The group's peak counter is reset at each entry by the
parent alone; before a reset, the peak so far is folded into every call still open in
that group, so a call around another keeps its whole window's peak. At exit it reads the
job group's usage and peak too. The readings stay in this process, keyed by the peer's
pid and the call's phase and index; the collector puts them beside the job's own
records.

A connection that ends without ``bye`` (an ``execve`` closes it: sockets are not
inherited) makes the parent look at that process's image a moment later: a new image
that never says hello is seen, and listed as not instrumented.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.attach.groups import JobGroups
from offloadprobe.attach.images import Image, image_of, started_of
from offloadprobe.measure.cgroup import MemoryGroup

_CRED = struct.Struct("3i")
RECHECK_S = 0.02
"""How long after a connection ends without ``bye`` the process's image is looked at."""


@dataclass(frozen=True, slots=True)
class GroupReading:
    """One call's cgroup figures, as the parent read them."""

    before: int
    """The process group's held bytes at entry."""
    after: int
    """... at exit."""
    peak: int | None
    """Its highest held bytes over the call less ``before`` (None: not known, where the
    kernel cannot reset the peak and the call set no new high)."""
    node_usage: int | None
    node_peak: int | None


@dataclass(slots=True)
class _Open:
    key: tuple[int, str, int]
    group: MemoryGroup
    before: int
    peak: int | None
    """The highest counter reading in the call's window so far (None: not resettable)."""
    entry_peak: int | None


@dataclass(slots=True)
class _Conn:
    pid: int
    registered: bool = False
    said_bye: bool = False


@dataclass(slots=True)
class Ledger:
    """What the parent learnt, for the collector."""

    images: dict[int, list[Image | None]] = field(default_factory=dict)
    """pid -> every image that said hello from it (None: not readable)."""
    readings: dict[tuple[int, str, int], GroupReading] = field(default_factory=dict)
    refused: int = 0
    """Connections from processes outside the job."""


class Meter(threading.Thread):
    """Serves the job's processes until stopped."""

    def __init__(
        self,
        name: str,
        *,
        groups: JobGroups | None,
        member: Callable[[int], bool],
        on_lost: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(name="offloadprobe-meter", daemon=True)
        self.name_in_job = name
        self.groups = groups
        self.member = member
        self.on_lost = on_lost
        self.ledger = Ledger()
        self._open: dict[tuple[int, str, int], _Open] = {}
        self._rechecks: list[tuple[float, int]] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._listener.bind("\0" + name)
        self._listener.listen(256)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._later: Callable[[], None] | None = None

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        while not self._stopping:
            timeout = None
            if self._rechecks:
                timeout = max(0.0, min(t for t, _ in self._rechecks) - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                    continue
                try:  # one bad connection must not stop the meter: every call waits on it
                    if key.data is None:
                        self._accept()
                    else:
                        self._serve(key.fileobj, key.data)  # type: ignore[arg-type]
                except Exception:
                    self._drop(key.fileobj)  # type: ignore[arg-type]
            self._due_rechecks()

    def stop(self) -> Ledger:
        """Stop serving (after the job ended); the ledger."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self.is_alive():
            self.join()
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_w.close()
        return self.ledger

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        pid, _, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        if not self.member(pid):
            self.ledger.refused += 1
            conn.close()
            return
        conn.setblocking(True)
        self._selector.register(conn, selectors.EVENT_READ, _Conn(pid=pid))

    def _serve(self, conn: socket.socket, state: _Conn) -> None:
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._selector.unregister(conn)
            conn.close()
            if state.registered and not state.said_bye:
                self._rechecks.append((time.monotonic() + RECHECK_S, state.pid))
            return
        self._later = None
        try:
            message = json.loads(data)
            answer = self._handle(state, message)
        except Exception:
            answer = "no"
        if answer is not None:
            with contextlib.suppress(OSError):
                conn.send(answer.encode())
        later, self._later = self._later, None
        if later is not None:  # what need not hold the call up
            with contextlib.suppress(Exception):
                later()

    def _drop(self, conn: socket.socket) -> None:
        if conn is self._listener:
            return
        with contextlib.suppress(Exception):
            self._selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def _due_rechecks(self) -> None:
        now = time.monotonic()
        due = [pid for t, pid in self._rechecks if t <= now]
        self._rechecks = [(t, pid) for t, pid in self._rechecks if t > now]
        for pid in due:
            if self.on_lost is not None:
                with contextlib.suppress(Exception):
                    self.on_lost(pid)

    # ------------------------------------------------------------ the messages

    def _handle(self, state: _Conn, message: list[Any]) -> str | None:
        kind = message[0]
        if kind == "hello":
            image = image_of(state.pid)
            self.ledger.images.setdefault(state.pid, []).append(image)
            state.registered = True
            started = image.started if image is not None else started_of(state.pid)
            if self.groups is not None and started is not None:
                self.groups.place(state.pid, started)
            return "ok"
        if kind == "bye":
            state.said_bye = True
            return None
        key = (state.pid, str(message[1]), int(message[2]))
        if kind == "enter":
            self._later = self._enter(key)
        elif kind == "exit":
            self._later = self._exit(key)
        return "ok"

    def _group(self, pid: int) -> MemoryGroup | None:
        if self.groups is None:
            return None
        mine = self.groups.own.get(pid)
        return mine[1] if mine is not None else None

    def _fold(self, group: MemoryGroup) -> int | None:
        """Read the group's peak and fold it into every call open in it."""
        assert self.groups is not None
        value = self.groups.peak(group)
        if value is not None:
            for call in self._open.values():
                if call.group.path == group.path and call.peak is not None:
                    call.peak = max(call.peak, value)
        return value

    def _enter(self, key: tuple[int, str, int]) -> Callable[[], None] | None:
        """Fold, reset, read the usage while the call waits; the page cache after the
        answer (it moves with file I/O, not with the call's first instructions)."""
        group = self._group(key[0])
        if group is None:
            return None
        assert self.groups is not None
        before_reset = self._fold(group)
        after_reset = self.groups.reset(group)
        usage = self.groups.usage(group)
        if usage is None:
            return None
        call = self._open[key] = _Open(
            key=key,
            group=group,
            before=usage,
            peak=after_reset,
            entry_peak=after_reset if after_reset is not None else before_reset,
        )
        groups = self.groups

        def later() -> None:
            call.before = usage - groups.cache(group)

        return later

    def _exit(self, key: tuple[int, str, int]) -> Callable[[], None] | None:
        """Fold and read the usage while the call waits; the rest after the answer."""
        call = self._open.pop(key, None)
        if call is None:
            return None
        assert self.groups is not None
        value = self._fold(call.group)
        usage = self.groups.usage(call.group)
        if usage is None:
            return None
        groups = self.groups

        def later() -> None:
            cache = groups.cache(call.group)
            if call.peak is not None:  # reset at entry: every reading since is the window's
                top: int | None = max(call.peak, value or 0)
            elif value is not None and call.entry_peak is not None and value > call.entry_peak:
                top = value  # a new high since entry: reached in the window
            else:
                top = None
            after = usage - cache
            peak = None if top is None else max(top - cache - call.before, after - call.before)
            node_usage, node_peak = groups.node()
            self.ledger.readings[key] = GroupReading(
                before=call.before,
                after=after,
                peak=None if peak is None else max(peak, 0),
                node_usage=node_usage,
                node_peak=node_peak,
            )

        return later
