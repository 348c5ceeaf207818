"""``registered``: exact-size host buffers page-locked with ``cudaHostRegister``.

PyTorch's pinned allocator rounds every allocation up to a power of two (a 5 GiB
buffer holds 8 GiB). Allocating exactly the buffer's bytes with the ordinary host
allocator and registering that range with CUDA gives the same DMA copy speed with
no rounding. The range is unregistered at teardown, before the tensor is freed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from offloadprobe.core.errors import OffloadProbeError
from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.host_copies import ReusedHostBuffers
from offloadprobe.layout.pinned import Alloc, Event

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime

_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context


class RegisteredStrategy(ReusedHostBuffers):
    """Exact-size host copy per buffer, registered with CUDA once, reused."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.registered_bytes = 0
        """Bytes page-locked outside PyTorch's pinned allocator."""

    def allocate(self, like: Any) -> Any:
        import torch

        host = torch.empty(like.shape, dtype=like.dtype, device="cpu")
        if self.runtime.can_pin:
            size = host.numel() * host.element_size()
            err = int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), size, _PORTABLE))
            if err != 0:
                raise OffloadProbeError(f"cudaHostRegister of {size} bytes failed: cudaError {err}")
            self.registered_bytes += size
        return host

    def close(self) -> None:
        """Unregister every range this strategy page-locked."""
        if not self.runtime.can_pin:
            return
        import torch

        for host in self.copies.values():
            torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
        self.registered_bytes = 0


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """One registered host copy per buffer on the first offload, reused afterwards."""
    return [
        Alloc(name=f"{name} host copy", nbytes=n, kind="registered")
        for name, n in zip(labels, payloads, strict=True)
    ]


STRATEGY = ModelStrategyInfo(
    name="registered",
    summary="exact-size host buffer page-locked with cudaHostRegister, reused",
    factory=RegisteredStrategy,
    host_events=host_events,
    emulation="no page-locking: an ordinary exact-size host buffer",
)
