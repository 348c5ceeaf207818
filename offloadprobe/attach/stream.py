"""Each process's own record file: JSON lines, appended and flushed one record at a time.

A record is written with one ``os.write`` of a whole line to a file opened with
``O_APPEND``, so a process killed at any point leaves every record it finished and at
most no partial line (the collector skips a torn last line and says so). Nothing is
buffered in Python: a record written is in the kernel's page cache, which survives the
process. stdlib only (imported in every process of the job).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any

from offloadprobe.attach import protocol


class Stream:
    """The record file of the process that opened it (reopened after a fork)."""

    def __init__(self, out_dir: str, host: str) -> None:
        self.out_dir = out_dir
        self.host = host
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.path = os.path.join(out_dir, protocol.stream_name(host, self.pid))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def reopen_after_fork(self) -> None:
        """A forked child writes to a file of its own pid; the parent's fd is left alone."""
        with_fd = self.fd
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.path = os.path.join(self.out_dir, protocol.stream_name(self.host, self.pid))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with contextlib.suppress(OSError):
            os.close(with_fd)

    def write(self, kind: str, **fields: Any) -> None:
        """One record; never raises (a full disk must not fail the job)."""
        fields["kind"] = kind
        fields.setdefault("time", time.time())
        try:
            line = json.dumps(fields, default=str, separators=(",", ":")) + "\n"
            data = line.encode()
            with self.lock:
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]
        except Exception:
            return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
