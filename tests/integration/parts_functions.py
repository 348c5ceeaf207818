"""Offload code for the model-parts tests (``--ref-model``, ``--frozen-fraction``).

``offload_ddp_buffers`` / ``load_ddp_buffers``: a framework's function pair that moves
the DDP buffers of DDP-wrapped chunks and skips every other chunk, and every parameter
outside the buffers: a reference model and frozen (LoRA base) weights stay on the device.
``FlipsReferenceBit``: ``lazy``, but one bit of the reference model changes on the way back.
"""

from __future__ import annotations

import torch

from offloadprobe.engine.strategies.lazy import LazyStrategy
from offloadprobe.plugin import free_storage, restore_storage

_HOST: dict[int, torch.Tensor] = {}


def _ddp_buffers(models):
    for chunk in models:
        buffers = getattr(chunk, "buffers", None)
        if isinstance(buffers, list):  # DDP-wrapped; anything else is not this code's
            yield from buffers


def offload_ddp_buffers(models):
    for buffer in _ddp_buffers(models):
        if buffer.param_data.untyped_storage().size():
            _HOST[id(buffer)] = buffer.param_data.detach().to("cpu", copy=True)
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)


def load_ddp_buffers(models):
    for buffer in _ddp_buffers(models):
        if not buffer.param_data.untyped_storage().size():
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            buffer.param_data.copy_(_HOST.pop(id(buffer)))
            buffer.grad_data.zero_()


class FlipsReferenceBit(LazyStrategy):
    def load(self, models):
        super().load(models)
        reference = models[-1]  # the reference model comes after the DDP chunks
        next(reference.parameters()).detach().view(torch.int16).view(-1)[3] ^= 1
