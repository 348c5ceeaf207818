"""User strategies with verl's signature, for the CLI tests (importable as a module)."""

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
