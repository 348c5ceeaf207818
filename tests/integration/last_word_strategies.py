"""Strategies that try to have the last word over their own measurement (issue 35, point
5): one moves its own process out of the worker's memory cgroup mid-offload, one resets
the group's peak and its own high-water mark after a transient, one rewrites its record
file from an ``atexit`` hook and ends with ``os._exit(0)``. Plugged in as
``tests.integration.last_word_strategies:X``.

Each says in class attributes what it really did, measured as it did it (the kernel's
figures, read by the strategy at the moment), so a test holds the reported figures
against that and never against the record under test alone.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

import torch

from tests.integration.corrupting_strategies import TwoSignBits
from tests.integration.outside_strategies import _buffers, _bytes, _free, _restore

ROOTS = ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def own_group() -> tuple[int, Path]:
    """(cgroup version, folder) of this process's memory cgroup, as it can find it."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return 1, Path(ROOTS[0] + path)
    path = next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
    for root in ROOTS[1:]:
        if Path(root + path, "memory.current").exists():
            return 2, Path(root + path)
    raise RuntimeError("no memory cgroup found")


class MovesItselfOut:
    """Writes its own PID into its group's parent (as root it may), then keeps the host
    copy in a memfd, in no process's RSS: outside every figure the worker's group gives,
    and outside any limit on that group. Truth: 1.0x held outside, from the offload on."""

    moved_from: str | None = None

    def __init__(self):
        self.fds = {}

    def offload(self, models):
        from offloadprobe.measure.cgroup import MemoryGroup, home_procs

        _, group = own_group()
        # the group above (on v2 its leaf for processes, where it delegates the controller)
        home_procs(MemoryGroup.at(group)).write_text(str(os.getpid()))
        type(self).moved_from = str(group)
        for i, buffer in enumerate(_buffers(models)):
            fd = self.fds.setdefault(i, os.memfd_create(f"outside-{i}"))
            os.pwrite(fd, _bytes(buffer.param_data), 0)
            _free(buffer)

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            size = buffer.param_data.numel() * buffer.param_data.element_size()
            _restore(buffer, os.pread(self.fds[i], size, 0))


def _usage(version: int, group: Path) -> int:
    name = "memory.usage_in_bytes" if version == 1 else "memory.current"
    return int((group / name).read_text())


class ResetsGroupPeak:
    """Keeps one exact host copy (steady 1.0x) and, during the offload, a second one for a
    moment (peak 2.0x); then resets the group's peak (v1: ``0`` to
    ``memory.max_usage_in_bytes``; v2: ``reset`` to ``memory.peak``) and its own VmHWM
    (``5`` to ``/proc/self/clear_refs``). Nothing else is copied on the way (each copy goes
    straight from the tensor into its buffer and back). ``rise`` is the group's usage at
    the top of the transient over its usage at the offload's start, as the strategy read
    it from the kernel there."""

    rise = 0

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        version, group = own_group()
        start = _usage(version, group)
        for i, buffer in enumerate(_buffers(models)):
            data = buffer.param_data.view(-1).view(torch.uint8)
            copy = self.copies.setdefault(i, bytearray(data.numel()))
            torch.frombuffer(copy, dtype=torch.uint8).copy_(data)
            _free(buffer)
        scratch = bytearray(sum(len(c) for c in self.copies.values()))  # zeroed: touched
        type(self).rise = max(type(self).rise, _usage(version, group) - start)
        del scratch
        peak = "memory.max_usage_in_bytes" if version == 1 else "memory.peak"
        (group / peak).write_text("0" if version == 1 else "reset")
        Path("/proc/self/clear_refs").write_text("5")

    def load(self, models):
        for i, buffer in enumerate(_buffers(models)):
            for t in (buffer.param_data, buffer.grad_data):
                t.untyped_storage().resize_(t.numel() * t.element_size())
            host = torch.frombuffer(self.copies[i], dtype=torch.uint8)
            buffer.param_data.view(-1).view(torch.uint8).copy_(host)
            buffer.grad_data.zero_()


def _erase_the_corruption() -> None:
    """The record file rewritten as a clean run's, then an exit status of 0."""
    result = Path(sys.argv[1]).with_name("result.json")
    data = json.loads(result.read_text())
    data["exit_code"] = 0
    for run in (data.get("report") or {}).get("runs", []):
        run["integrity"] = []
        if run.get("summary"):
            run["summary"]["integrity_ok"] = True
    result.write_text(json.dumps(data))
    sys.stdout.flush()
    os._exit(0)


class ErasesItsCorruption(TwoSignBits):
    """Corrupts ``param_data`` on load (two sign bits), and registers an ``atexit`` hook
    that rewrites the worker's record file to a clean run's and ends with ``os._exit(0)``:
    after the worker wrote its record, before its process ends."""

    def __init__(self):
        super().__init__()
        atexit.register(_erase_the_corruption)
