"""What one offload moves, as one list: each DDP buffer's ``param_data`` and each parameter
outside the buffers (frozen ones, a reference model's), a source each.

For strategies that treat every tensor they move alike (a host mapping per source, copied
chunk by chunk): a buffer's source frees and restores its ``grad_data`` beside it, a loose
parameter's has none. The selection is ``to_offload``/``loose_to_offload`` and
``to_load``/``loose_to_load``: an offload of what is offloaded, and a load of what is
loaded, find nothing to move (the sequences' invariant).

Torch-free at import: the tensors come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offloadprobe.engine.model.buffers import (
    free_storage,
    loose_to_load,
    loose_to_offload,
    nbytes,
    restore_storage,
    to_load,
    to_offload,
)
from offloadprobe.engine.optimizer.holdings import storage_key

BUFFER = "DDP buffer"
LOOSE = "parameter outside the DDP buffers"


@dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """One tensor an offload copies to the host and frees, and a load restores."""

    key: int
    """Identity of its owner (the buffer or the ``Parameter``), the host copy's key."""
    data: Any
    """The tensor whose bytes move (``param_data``, or the parameter detached)."""
    grads: Any = None
    """A buffer's ``grad_data``: freed with it, restored zeroed; None for a parameter."""
    kind: str = BUFFER

    @property
    def nbytes(self) -> int:
        return nbytes(self.data)

    def free(self) -> None:
        """Release the device storage (every view stays a valid object)."""
        free_storage(self.data)
        if self.grads is not None:
            free_storage(self.grads)

    def restore(self) -> None:
        """Give the storage back (contents undefined until written)."""
        restore_storage(self.data)

    def restore_grads(self) -> None:
        """A buffer's ``grad_data`` back, zeroed, as a fresh phase expects (after its data)."""
        if self.grads is not None:
            restore_storage(self.grads)
            self.grads.zero_()


def _buffer(buffer: Any) -> Source:
    return Source(key=id(buffer), data=buffer.param_data, grads=buffer.grad_data)


def _loose(param: Any) -> Source:
    return Source(key=storage_key(param), data=param.detach(), kind=LOOSE)


def to_offload_sources(models: list[Any]) -> list[Source]:
    """Sources an offload moves: buffers, then loose parameters, holding their storage."""
    return [_buffer(b) for b in to_offload(models)] + [_loose(p) for p in loose_to_offload(models)]


def to_load_sources(models: list[Any]) -> list[Source]:
    """Sources a load restores: buffers, then loose parameters, whose storage was freed."""
    return [_buffer(b) for b in to_load(models)] + [_loose(p) for p in loose_to_load(models)]
