"""A rank strategy that keeps its offloaded copy outside its process's RSS, with no host
copy on the way: rank 0 in a memfd, every other rank in a file in /dev/shm. Each buffer's
bytes go straight from its own storage into the file (``os.pwrite`` of a view) and come
back the same way (``os.preadv`` into it), so the process's RSS never holds them; only a
memory cgroup the rank is charged in sees them.

At each offload's end it writes what the kernel says its copies occupy, the files'
blocks (``fstat``: ``st_blocks`` x 512), to ``outside-rank<RANK>.json`` in its working
directory (the test's folder): the truth a test holds the rank's figures against,
measured by the kernel, not by offloadprobe. Plugged in as
``tests.integration.rank_outside_strategies:MemfdOrShm``.
"""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from pathlib import Path

SHM = "/dev/shm"
PREFIX = "offloadprobe-rank-test-"


def _buffers(models):
    for chunk in models:
        yield from chunk.buffers


def _view(tensor):
    """The tensor's own bytes, as a buffer the file calls read or write in place (by
    address: a numpy view would leave the storage unresizable)."""
    nbytes = tensor.numel() * tensor.element_size()
    return memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B")


class MemfdOrShm:
    def __init__(self):
        self.rank = int(os.environ.get("RANK", "0"))
        self.fds: dict[int, int] = {}
        self.paths: list[str] = []

    def _fd(self, index: int) -> int:
        fd = self.fds.get(index)
        if fd is None:
            if self.rank == 0:
                fd = os.memfd_create(f"rank-copy-{index}")
            else:
                path = f"{SHM}/{PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                self.paths.append(path)
            self.fds[index] = fd
        return fd

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            view = _view(buffer.param_data)
            os.pwrite(self._fd(i), view, 0)
            view.release()
            buffer.param_data.untyped_storage().resize_(0)
            buffer.grad_data.untyped_storage().resize_(0)
        held = sum(os.fstat(fd).st_blocks * 512 for fd in self.fds.values())
        kind = "memfd" if self.rank == 0 else "/dev/shm"
        Path(f"outside-rank{self.rank}.json").write_text(json.dumps({"bytes": held, "in": kind}))

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            for t in (buffer.param_data, buffer.grad_data):
                t.untyped_storage().resize_(t.numel() * t.element_size())
            view = _view(buffer.param_data)
            os.preadv(self.fds[i], [view], 0)
            view.release()
            buffer.grad_data.zero_()

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        for path in self.paths:
            os.unlink(path)
