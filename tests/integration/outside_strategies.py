"""Strategies that keep their host copy where the measured process's own RSS does not show
it: a file in /dev/shm, a memfd, a helper process, a shared-memory segment left linked,
a pool made at construction, a transient hidden by resetting VmHWM.

Each keeps exactly one copy of ``param_data`` (the truth: 1.0x steady) unless its
docstring says otherwise, and records the bytes it holds outside in ``held`` so a test can
check the reported figure against what was really held. Plugged in as
``tests.integration.outside_strategies:X``.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import uuid

import torch

SHM = "/dev/shm"


def _buffers(models):
    for chunk in models:
        yield from chunk.buffers


def _bytes(tensor):
    """The tensor's bytes, through a host copy (its own storage must stay resizable)."""
    return tensor.detach().to("cpu", copy=True).view(-1).view(torch.uint8).numpy().tobytes()


def _free(buffer):
    buffer.param_data.untyped_storage().resize_(0)
    buffer.grad_data.untyped_storage().resize_(0)


def _restore(buffer, raw: bytes):
    for t in (buffer.param_data, buffer.grad_data):
        t.untyped_storage().resize_(t.numel() * t.element_size())
    host = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    buffer.param_data.view(-1).view(torch.uint8).copy_(host)
    buffer.grad_data.zero_()


class ShmFile:
    """The copy in a file in /dev/shm (tmpfs): shared memory, in no process's RSS."""

    def __init__(self):
        self.paths = {}

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            path = self.paths.setdefault(i, f"{SHM}/offloadprobe-test-{uuid.uuid4().hex}")
            with open(path, "wb") as fh:
                fh.write(_bytes(buffer.param_data))
            _free(buffer)

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            with open(self.paths[i], "rb") as fh:
                _restore(buffer, fh.read())

    def close(self):
        for path in self.paths.values():
            os.unlink(path)


class Memfd:
    """The copy in an anonymous memory file (``memfd_create``), not mapped."""

    def __init__(self):
        self.fds = {}

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            fd = self.fds.get(i)
            if fd is None:
                fd = self.fds[i] = os.memfd_create(f"copy-{i}")
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, _bytes(buffer.param_data))
            _free(buffer)

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            size = buffer.param_data.numel() * buffer.param_data.element_size()
            _restore(buffer, os.pread(self.fds[i], size, 0))

    def close(self):
        for fd in self.fds.values():
            os.close(fd)


_HELPER = r"""
import sys
data = {}
sys.stdout.buffer.write(b"ready\n")
sys.stdout.buffer.flush()
while True:
    head = sys.stdin.buffer.readline()
    if not head:
        break
    op, key, size = head.split()
    if op == b"put":
        data[key] = bytearray(sys.stdin.buffer.read(int(size)))
    else:
        sys.stdout.buffer.write(bytes(data[key]))
        sys.stdout.buffer.flush()
"""


def _anon_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    return int(fields["RssAnon"].split()[0]) * 1024


class HelperProcess:
    """The copy in a helper process's memory (as an async checkpointer or a loader would).
    The helper's own interpreter is host memory the strategy holds from construction on:
    ``helper_rss`` is its anonymous RSS once it is ready."""

    helper_rss = 0

    def __init__(self):
        self.helper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.helper.stdout.readline() == b"ready\n"
        type(self).helper_rss = _anon_rss(self.helper.pid)
        self.sizes = {}

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            raw = _bytes(buffer.param_data)
            self.sizes[i] = len(raw)
            self.helper.stdin.write(b"put %d %d\n" % (i, len(raw)) + raw)
            self.helper.stdin.flush()
            _free(buffer)

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            self.helper.stdin.write(b"get %d 0\n" % i)
            self.helper.stdin.flush()
            _restore(buffer, self.helper.stdout.read(self.sizes[i]))

    def close(self):
        self.helper.stdin.close()
        self.helper.wait(timeout=30)


class SharedMemoryLeftLinked:
    """The copy in a ``multiprocessing.shared_memory`` segment: mapped only while it is
    written or read, and never unlinked while the run lasts. multiprocessing starts its
    resource tracker, a helper process, for the segment: ``helper_rss`` is its anonymous RSS, read
    after the offload (it is host memory the strategy holds too)."""

    helper_rss = 0

    def __init__(self):
        from multiprocessing import shared_memory

        self.shared_memory = shared_memory
        self.names = {}

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            raw = _bytes(buffer.param_data)
            name = self.names.get(i)
            if name is None:
                segment = self.shared_memory.SharedMemory(create=True, size=len(raw))
                self.names[i] = segment.name
            else:
                segment = self.shared_memory.SharedMemory(name=name)
            segment.buf[: len(raw)] = raw
            segment.close()  # unmapped: no RSS, still in /dev/shm
            _free(buffer)
        from multiprocessing import resource_tracker

        pid = getattr(resource_tracker._resource_tracker, "_pid", None)
        if pid:  # its anonymous memory (its libraries are page cache, not held)
            type(self).helper_rss = _anon_rss(pid)

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            segment = self.shared_memory.SharedMemory(name=self.names[i])
            size = buffer.param_data.numel() * buffer.param_data.element_size()
            raw = bytes(segment.buf[:size])
            segment.close()
            _restore(buffer, raw)

    def close(self):
        for name in self.names.values():
            segment = self.shared_memory.SharedMemory(name=name)
            segment.close()
            segment.unlink()


class PoolAtConstruction:
    """A host pool of ``pool_bytes`` (the test sets it to twice the parameters), made and
    touched when the strategy is built; the copy goes into its first half. Truth: the pool,
    steady, from construction on."""

    pool_bytes = 0

    def __init__(self):
        self.pool = mmap.mmap(-1, self.pool_bytes)
        self.pool.write(b"\x01" * self.pool_bytes)  # every page resident

    def offload(self, models):
        offset = 0
        for buffer in _buffers(models):
            raw = _bytes(buffer.param_data)
            self.pool[offset : offset + len(raw)] = raw
            offset += len(raw)
            _free(buffer)

    def load(self, models):
        offset = 0
        for buffer in _buffers(models):
            size = buffer.param_data.numel() * buffer.param_data.element_size()
            _restore(buffer, self.pool[offset : offset + size])
            offset += size


class TransientHiddenByClearRefs:
    """An exact host copy, plus a second full copy alive for a moment during the offload,
    after which the strategy resets its process's high-water mark (``5`` to
    ``/proc/self/clear_refs``). Truth: peak 2.0x, steady 1.0x."""

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        for i, buffer in enumerate(_buffers(models)):
            raw = _bytes(buffer.param_data)
            scratch = bytearray(raw)  # the transient
            self.copies[i] = bytearray(raw)
            del scratch
            _free(buffer)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            _restore(buffer, bytes(self.copies[i]))
