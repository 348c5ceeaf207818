"""The parent's side of the worker's channel (the worker's is ``engine.channel``): it
listens, holds what the worker tells it, reads the group's peak at the worker's marks,
and watches the worker's cgroup membership from outside.

``Warden(group)`` listens on an abstract UNIX socket before the worker starts; a thread
accepts the first connection (the worker connects before any strategy code runs) and
learns its process from the kernel (``SO_PEERCRED``). Then, for each line:

- a phase's start mark: the group's peak is reset (``measure.parent_peaks``); its end
  mark: the peak is read, a ``PhasePeak``;
- integrity problems and the result are kept as they came (``core.streamed.Streamed``);

and every line is acknowledged only once that is done. Meanwhile, at every line and every
``POLL_S`` between them, the worker's ``/proc/PID/cgroup`` is read: a worker that was in
its group when it connected and is found outside it has escaped (what it holds from then
on is in no figure and under no limit) and, where it is a process of its own, is killed
at once. A move out and back within one ``POLL_S`` and between two marks can go unseen;
the memory it charged meanwhile stays charged outside.

This module imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import threading
import uuid
from typing import Any

from offloadprobe.core.streamed import PhasePeak, Streamed
from offloadprobe.isolation.escapes import Escaped, describe, left
from offloadprobe.measure.parent_peaks import ParentPeaks

POLL_S = 0.01
LONGEST = 1 << 28
"""Bytes of one line at most (a record is some kilobytes to a few megabytes)."""
"""How often the worker's cgroup membership is read between two of its lines."""
ACK = b"\n"


class Warden:
    """Listens for one worker; ``group``: its memory cgroup (None: none); ``scale``: the
    bytes its offload moves, about (the unit of the v1 thresholds)."""

    def __init__(self, group: Any = None, scale: int = 0) -> None:
        self.path = f"\0offloadprobe-warden-{os.getpid()}-{uuid.uuid4().hex}"
        """An abstract socket (Linux): no file for anyone to replace, no path to outgrow."""
        self.group = group
        self.peaks = ParentPeaks(group, scale) if group is not None else None
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(1)
        self._server.settimeout(POLL_S)
        self._stop = threading.Event()
        self.pid: int | None = None
        self.escaped: Escaped | None = None
        self.where: tuple[int, str] | None = None
        """The last phase that started (and has not ended): where an escape is placed."""
        self._connected = False
        self._inside = False
        self._marks: list[PhasePeak] = []
        self._problems: list[str] = []
        self._result: dict[str, Any] | None = None
        self._done = False
        self._garbled = 0
        self._thread = threading.Thread(target=self._serve, name="offloadprobe-warden")
        self._thread.daemon = True
        self._thread.start()

    @property
    def owns_peaks(self) -> bool:
        return self.peaks is not None

    # ------------------------------------------------------------------ the thread

    def _serve(self) -> None:
        conn = self._accept()
        if conn is None:
            return
        try:
            self._talk(conn)
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> socket.socket | None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return None
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            self.pid = struct.unpack("3i", creds)[0]
            self._connected = True
            # watched from here on, where it starts inside (a test's worker in this
            # process may run beside a group it never joined: it cannot leave it)
            self._inside = self.group is not None and self.group.holds(self.pid) is True
            conn.settimeout(POLL_S)
            return conn
        return None

    def _talk(self, conn: socket.socket) -> None:
        pending = b""
        while not self._stop.is_set():
            try:
                data = conn.recv(1 << 16)
            except TimeoutError:
                self._watch()
                continue
            except OSError:
                return
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            if len(pending) > LONGEST:  # no line of the worker's is this long
                pending, self._garbled = b"", self._garbled + 1
            for line in lines:
                self._watch()
                try:
                    self._take(json.loads(line))
                except Exception:  # whatever it sent, the parent keeps listening
                    self._garbled += 1
                with contextlib.suppress(OSError):
                    conn.sendall(ACK)

    def _take(self, message: dict[str, Any]) -> None:
        if self._done:
            return  # the worker said its last word: nothing after it counts
        if "mark" in message:
            cycle, phase = int(message["cycle"]), str(message["phase"])
            if message["mark"] == "start":
                self.where = (cycle, phase)
                if self.peaks is not None:
                    self.peaks.begin()
            else:
                self._end(cycle, phase)
        elif "problems" in message:
            self._problems += [str(line) for line in message["problems"]]
        elif "result" in message:
            if self._result is None:  # the first one sent: a second cannot replace it
                self._result = dict(message["result"])
        elif "done" in message:
            self._done = True

    def _end(self, cycle: int, phase: str) -> None:
        read = self.peaks.end() if self.peaks is not None else None
        self._marks.append(
            PhasePeak(
                cycle=cycle,
                phase=phase,
                peak_bytes=read.peak_bytes if read is not None else None,
                floor_bytes=read.floor_bytes if read is not None else None,
                file_after_bytes=read.file_after_bytes if read is not None else None,
            )
        )
        self.where = None

    def _watch(self) -> None:
        """The worker in its group? Read from the kernel, not asked of the worker."""
        if not self._inside or self.pid is None or self._done or self.escaped is not None:
            return
        if not left(self.group, self.pid):
            return
        self.escaped = describe(self.pid)
        if self.pid != os.getpid():  # a worker in this process (tests) is not killed
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ the caller's

    def stop(self) -> Streamed:
        """Stop listening (the worker has ended); everything it was told."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        with contextlib.suppress(OSError):
            self._server.close()
        if self.peaks is not None:
            self.peaks.close()
        return Streamed(
            connected=self._connected,
            marks=list(self._marks),
            problems=list(self._problems),
            result=self._result,
            peaks_by_parent=self.owns_peaks and self._inside,
            garbled=self._garbled,
        )

    def escape_message(self) -> str | None:
        """The escape in words, with where it was found, if one was."""
        if self.escaped is None:
            return None
        e = self.escaped
        where = f" during cycle {self.where[0]}, phase {self.where[1]}" if self.where else ""
        killed = " (killed)" if e.pid != os.getpid() else ""
        return (
            f"the measured process (pid {e.pid}, {e.command}) left its memory cgroup{where}, "
            f"{_mib(e.rss)} resident: what it held from then on is in no figure and under "
            f"no limit{killed}"
        )


def _mib(nbytes: int) -> str:
    from offloadprobe.core.units import format_bytes

    return format_bytes(nbytes)


PEAKS_NOTE = (
    "host peaks: the worker's cgroup peak, reset and read by its parent at each phase "
    "(v1: with the kernel's usage thresholds)"
)


def held_against(run: Any, facts: Streamed) -> Any:
    """A single process's record with what its parent holds: every streamed problem in
    its integrity, each marked phase's group peak the larger of the parent's reading and
    the record's, and the summary's peak figures derived again from them."""
    from dataclasses import replace

    from offloadprobe.core.streamed import merge
    from offloadprobe.measure.governing import parent_peak
    from offloadprobe.measure.summary import repeaked

    run = merge(run, facts)
    if run.place is not None or run.world is not None or not facts.peaks_by_parent:
        return run
    if all(mark.peak_bytes is None for mark in facts.marks):
        return run  # none phase-local here (cgroup v2 before Linux 6.12)
    queue: dict[tuple[int, str], list[PhasePeak]] = {}
    for mark in facts.marks:
        queue.setdefault((mark.cycle, mark.phase), []).append(mark)
    phases = []
    for phase in run.phases:
        waiting = queue.get((phase.cycle, phase.phase))
        phases.append(parent_peak(phase, waiting.pop(0)) if waiting else phase)
    summary = run.summary
    if summary is not None:
        summary = repeaked(summary, phases, run.baseline_host_bytes)
    return replace(run, phases=phases, summary=summary, notes=[*run.notes, PEAKS_NOTE])


def payload_of(cfg: Any) -> int:
    """The bf16 parameter bytes of ``cfg``'s model, from its shape (no torch)."""
    from offloadprobe.core.config import model_param_count

    m = cfg.model
    count = model_param_count(
        m.num_layers, m.hidden_size, m.vocab_size, m.seq_length, m.num_experts
    )
    return 2 * count
