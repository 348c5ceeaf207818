"""User strategies with verl's signature, for the CLI tests (importable as a module)."""

import os
import tempfile
from pathlib import Path

import torch


class KeepOnHost:
    """A correct user strategy: plain host copies, storage freed and restored."""

    def __init__(self):
        self.copies = {}

    def _buffers(self, models):
        for chunk in models:
            yield from chunk.buffers

    def offload(self, models):
        for buf in self._buffers(models):
            self.copies[id(buf)] = buf.param_data.detach().to("cpu", copy=True)
            buf.param_data.untyped_storage().resize_(0)
            buf.grad_data.untyped_storage().resize_(0)

    def load(self, models):
        for buf in self._buffers(models):
            for t in (buf.param_data, buf.grad_data):
                t.untyped_storage().resize_(t.numel() * t.element_size())
            buf.param_data.copy_(self.copies[id(buf)])
            buf.grad_data.zero_()


class FlipsOneBit(KeepOnHost):
    """A broken user strategy: one bit of one parameter changes on the way back."""

    def load(self, models):
        super().load(models)
        first = next(iter(self._buffers(models))).param_data
        first.view(torch.int16)[7] ^= 1


keep_on_host = KeepOnHost()


class KillsItself(KeepOnHost):
    """A strategy whose process dies by SIGKILL mid-offload, as under the OOM killer."""

    def offload(self, models):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def started_mark(pid: int) -> Path:
    """The file ``SleepsInOffload`` makes in process ``pid`` as its offload starts."""
    return Path(tempfile.gettempdir()) / f"sleeps-in-offload-{pid}"


class SleepsInOffload(KeepOnHost):
    """A strategy whose offload takes 20 s (a window to end something beside it in). It
    says when the window opens: ``started_mark(pid)`` exists from then on."""

    def offload(self, models):
        import time

        started_mark(os.getpid()).touch()
        time.sleep(20)
        super().offload(models)


class SkipsOffload(KeepOnHost):
    """A strategy written to fool the gate: it moves nothing, so the host never grows
    (and it zeroes the grads on load, so the round trip alone cannot catch it)."""

    def offload(self, models):
        pass

    def load(self, models):
        for buf in self._buffers(models):
            buf.grad_data.zero_()


class OutOfMemoryInOffload(KeepOnHost):
    """A strategy whose offload hits PyTorch's device OOM, as a real one would on CUDA."""

    def offload(self, models):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class RaisesInLoad(KeepOnHost):
    """A strategy with a bug: load raises."""

    def load(self, models):
        raise RuntimeError("load lost its host copy")


class ForgesAndExitsInLoad(KeepOnHost):
    """Prints a verdict line of its own, then ends its process in the middle of a load with
    exit status 0: no record is written, and the printed line must not pass for a verdict."""

    def offload(self, models):
        print("forged + none: ok, round trip bit-exact", flush=True)
        super().offload(models)

    def load(self, models):
        import os

        super().load(models)
        os._exit(0)


class RaisesInClose(KeepOnHost):
    """A correct offload whose ``close`` raises: a crash in close, the report kept."""

    def close(self):
        raise RuntimeError("close lost its handle")
