"""User strategies that move memory on a worker thread while the main thread frees.

Plugged in as ``tests.integration.threaded_strategies:X``; each docstring gives the true
figure (P = the param_data payload).
"""

import threading
import time

import torch


def _buffers(models):
    for chunk in models:
        yield from chunk.buffers


def _free(tensor):
    tensor.untyped_storage().resize_(0)


def _restore(tensor):
    tensor.untyped_storage().resize_(tensor.numel() * tensor.element_size())


class CopiesOnAThread:
    """Honest: every offload copies each buffer's ``param_data`` into a fresh exact-size
    host buffer on a ``threading.Thread`` while the main thread frees ``grad_data``: the
    host buffer's page faults (its allocation, filled under torch's deterministic mode,
    and the copy) fall inside the free. Load copies back and drops the host buffer.
    Steady host 1x, host peak 1x."""

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        for buf in _buffers(models):
            param = buf.param_data
            started = threading.Event()
            worker = threading.Thread(target=self._copy, args=(param, id(buf), started))
            worker.start()
            started.wait()
            time.sleep(0.002)  # a head start: the thread allocates while we free
            _free(buf.grad_data)
            worker.join()
            _free(param)

    def _copy(self, param, key, started):
        started.set()
        host = torch.empty(param.shape, dtype=param.dtype, device="cpu")
        host.copy_(param)  # page faults on this thread, the GIL released
        self.copies[key] = host

    def load(self, models):
        for buf in _buffers(models):
            host = self.copies.pop(id(buf))
            _restore(buf.param_data)
            buf.param_data.copy_(host)
            del host
            _restore(buf.grad_data)
            buf.grad_data.zero_()
