"""Strategies that break on an unusual sequence, for the ``--sequence`` tests (plugged in as
``tests.integration.sequence_strategies:X``). Each is correct on the fixed cycle.
"""

from __future__ import annotations

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage


class FreshCopyEveryOffload:
    """A fresh host buffer on every offload; the copy into it is guarded (nothing to copy
    from a freed buffer), the replacement is not: a second offload in a row replaces the
    good copy with a zeroed one, and the next load brings zeros back."""

    def __init__(self) -> None:
        self.host: dict[int, torch.Tensor] = {}

    def offload(self, models):
        for buffer in ddp_buffers(models):
            param = buffer.param_data
            host = torch.zeros(param.shape, dtype=param.dtype, device="cpu")
            if param.untyped_storage().size():
                host.copy_(param)
            self.host[id(buffer)] = host
            free_storage(param)
            free_storage(buffer.grad_data)

    def load(self, models):
        for buffer in ddp_buffers(models):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            buffer.param_data.copy_(self.host[id(buffer)])
            buffer.grad_data.zero_()


class StaleLoad(FreshCopyEveryOffload):
    """Every load copies its host copy back, offloaded or not: a load of what is on the
    device puts the parameters of the last offload back over the trained ones."""

    def offload(self, models):
        for buffer in ddp_buffers(models):
            if buffer.param_data.untyped_storage().size():
                self.host[id(buffer)] = buffer.param_data.detach().to("cpu", copy=True)
                free_storage(buffer.param_data)
                free_storage(buffer.grad_data)
