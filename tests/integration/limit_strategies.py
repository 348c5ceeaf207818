"""A strategy written to slip past ``--host-limit``: what the offload adds sits behind page
cache charged to the worker's group, which the kernel reclaims before it kills. Plugged
in as ``tests.integration.limit_strategies:BehindMappedCache``.

Its files are unlinked as soon as they are made and kept open: the pages stay charged
to the worker's memory cgroup while it runs, and nothing is left on disk when it ends,
killed or not.
"""

import mmap
import os
import tempfile

import torch

from tests.integration.adversarial_strategies import _buffers, _free, _restore

CUSHION = 48 * 2**20
"""Bytes of each cushion: more than the offload adds in the test that uses it."""

_KEPT = []
"""Files and mappings kept open for the worker's life."""


def _host(like):
    return torch.empty(like.shape, dtype=like.dtype, device="cpu")


def _written(nbytes):
    """An unlinked file of ``nbytes`` on the temporary folder's file system, written and
    synced: clean page cache, charged to this process's cgroup, that no process maps."""
    handle = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for the worker's life)
    block = os.urandom(2**20)
    for _ in range(nbytes // len(block)):
        handle.write(block)
    handle.flush()
    os.fsync(handle.fileno())
    _KEPT.append(handle)
    return handle


def _mapped(nbytes):
    """The same file mapped and read through once: page cache this process maps (its RSS
    counts it as a file mapping), which the kernel may still reclaim."""
    handle = _written(nbytes)
    view = mmap.mmap(handle.fileno(), nbytes, access=mmap.ACCESS_READ)
    sum(view[i] for i in range(0, nbytes, mmap.PAGESIZE))
    _KEPT.append(view)
    return view


class _Copies:
    """naive's pattern: a fresh host copy of every buffer each offload, the previous one
    dropped only when it is replaced (2x the payload at cycle 0's offload, 3x after)."""

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        for buf in _buffers(models):
            staging = _host(buf.param_data).copy_(buf.param_data)
            self.copies[id(buf)] = _host(buf.param_data).copy_(staging)
            del staging
            _free(buf.param_data)
            _free(buf.grad_data)

    def load(self, models):
        for buf in _buffers(models):
            _restore(buf.param_data)
            buf.param_data.copy_(self.copies[id(buf)])
            _restore(buf.grad_data)
            buf.grad_data.zero_()


class BehindMappedCache(_Copies):
    """Before the first offload, 48 MiB of page cache the worker maps (and 48 MiB it does
    not): the mapped part stays charged when the limit is set, and the kernel reclaims it
    instead of killing. Only the measured host peak, held over the limit, catches it."""

    def __init__(self):
        super().__init__()
        _written(CUSHION)
        _mapped(CUSHION)
