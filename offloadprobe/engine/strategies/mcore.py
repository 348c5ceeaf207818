"""``mcore``: megatron-core's own buffer offload, called as NeMo-RL calls it.

Every ``_ParamAndGradBuffer`` of every chunk (dense, then expert-parallel) goes through
``offload_to_cpu(move_params=True, move_grads=True)`` and back through
``reload_from_cpu(move_params=True, move_grads=True)``; nothing of offloadprobe's own is
in the path. In megatron-core 0.16 to 0.19 the first offload makes ``param_data.cpu()``
and then ``.pin_memory()`` of it (both alive at once, the pinned one rounded up by
PyTorch's pinned allocator) and keeps the pinned copy as ``param_data_cpu``; later offloads
``copy_`` into it with ``non_blocking=True``, and the storage is freed right after. The
strategy synchronises before returning, as NeMo-RL does after moving the model.

megatron-core's buffer offload knows only DDP buffers. The parameters outside them
(frozen ones, a reference model's) go as verl moves them, one by one: each
offload makes one host copy of each, ``.to("cpu", non_blocking=True)`` (a pinned copy from
PyTorch's pinned allocator on CUDA, rounded up as it rounds), then frees its device
storage in place (views stay valid); each load copies it back and drops the host copy,
as a framework's ``param.data = param.data.to(device)`` drops it (on CUDA its block goes
to PyTorch's pinned cache). The run's notes say how many moved this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.model.buffers import (
    ddp_buffers,
    free_storage,
    loose_to_load,
    loose_to_offload,
    require_methods,
    restore_storage,
)
from offloadprobe.engine.optimizer.holdings import storage_key
from offloadprobe.layout.pinned import Alloc, Event, Free

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime

BUFFER_METHODS = ("offload_to_cpu", "reload_from_cpu")


class McoreStrategy:
    """``_ParamAndGradBuffer.offload_to_cpu()`` / ``reload_from_cpu()`` on every buffer;
    every parameter outside the buffers through one ``.to("cpu")`` host copy each."""

    def __init__(self, runtime: Runtime) -> None:
        from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBuffer

        require_methods(_ParamAndGradBuffer, BUFFER_METHODS, "_ParamAndGradBuffer")
        self.runtime = runtime
        self.loose: dict[int, Any] = {}
        """Host copy of each parameter outside the DDP buffers, from its offload to its load."""
        self.notes: list[str] = []

    def offload(self, models: list[Any]) -> None:
        self.runtime.synchronize()
        for buffer in ddp_buffers(models):
            buffer.offload_to_cpu(move_params=True, move_grads=True)
        loose = loose_to_offload(models)
        for param in loose:
            self.loose[storage_key(param)] = param.detach().to("cpu", non_blocking=True)
        self.runtime.synchronize()  # every copy landed before any device storage is freed
        for param in loose:
            free_storage(param)
        if loose:
            self._note(len(loose))

    def load(self, models: list[Any]) -> None:
        for buffer in ddp_buffers(models):
            buffer.reload_from_cpu(move_params=True, move_grads=True)
        loose = loose_to_load(models)
        for param in loose:
            restore_storage(param)
            param.detach().copy_(self.loose[storage_key(param)], non_blocking=True)
        self.runtime.synchronize()
        for param in loose:  # dropped, as a framework's param.data = param.data.to(device)
            del self.loose[storage_key(param)]

    def _note(self, count: int) -> None:
        note = (
            f"mcore: {count} parameters outside the DDP buffers moved "
            'as verl moves them, .to("cpu", non_blocking=True) each: '
            "megatron-core's buffer offload knows only DDP buffers"
        )
        if note not in self.notes:
            self.notes.append(note)


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """First offload: ``param_data.cpu()`` (pageable) and ``.pin_memory()`` of it, both alive
    until the expression ends; the pinned copy is kept as ``param_data_cpu`` and reused."""
    events: list[Event] = []
    for name, n in zip(labels, payloads, strict=True):
        events += [
            Alloc(name=f"{name} .cpu() pageable temporary", nbytes=n, kind="pageable"),
            Alloc(name=f"{name} param_data_cpu", nbytes=n),
            Free(name=f"{name} .cpu() pageable temporary"),
        ]
    return events


STRATEGY = ModelStrategyInfo(
    name="mcore",
    summary="megatron-core's own buffer offload_to_cpu / reload_from_cpu",
    factory=McoreStrategy,
    host_events=host_events,
    emulation=(
        "megatron's code as written; `.pin_memory()` makes a second ordinary host copy, and "
        "grad_data is freed first, so its host pages can absorb the first-cycle transient; "
        'parameters outside the DDP buffers go by `.to("cpu")`, one ordinary host copy each'
    ),
)
