"""A strategy whose helper process moves itself out of the worker's memory cgroup (it can,
as root) and keeps the host copy there: the cgroup's figures would miss it. Plugged in as
``tests.integration.escaping_strategies:X``."""

from __future__ import annotations

import subprocess
import sys

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage

_HELPER = r"""
import os, sys
group = open(f"/proc/{os.getpid()}/cgroup").read().strip().splitlines()[-1].split(":", 2)[2]
for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory"):
    parent = root + os.path.dirname(group)
    if os.path.exists(parent + "/cgroup.procs"):
        open(parent + "/cgroup.procs", "w").write(str(os.getpid()))
        break
sys.stdout.buffer.write(b"moved\n")
sys.stdout.buffer.flush()
data = {}
while True:
    head = sys.stdin.buffer.readline()
    if not head:
        break
    op, key, size = head.split()
    if op == b"put":
        data[key] = sys.stdin.buffer.read(int(size))
    else:
        sys.stdout.buffer.write(data[key])
        sys.stdout.buffer.flush()
"""


class EscapingHelper:
    """The host copy in a helper that left the worker's memory cgroup."""

    def __init__(self):
        self.helper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.helper.stdout.readline() == b"moved\n"
        self.sizes = {}

    def offload(self, models):
        for i, b in enumerate(ddp_buffers(models)):
            raw = (
                b.param_data.detach()
                .to("cpu", copy=True)
                .view(-1)
                .view(torch.uint8)
                .numpy()
                .tobytes()
            )
            self.sizes[i] = len(raw)
            self.helper.stdin.write(b"put %d %d\n" % (i, len(raw)) + raw)
            self.helper.stdin.flush()
            free_storage(b.param_data)
            free_storage(b.grad_data)

    def load(self, models):
        for i, b in enumerate(ddp_buffers(models)):
            self.helper.stdin.write(b"get %d 0\n" % i)
            self.helper.stdin.flush()
            raw = bytearray(self.helper.stdout.read(self.sizes[i]))
            restore_storage(b.param_data)
            restore_storage(b.grad_data)
            b.param_data.view(-1).view(torch.uint8).copy_(torch.frombuffer(raw, dtype=torch.uint8))
            b.grad_data.zero_()
