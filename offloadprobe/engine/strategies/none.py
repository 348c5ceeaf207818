"""``none``: model parameters stay on the device (to measure optimizer offload alone)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.layout.pinned import Event

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime


class KeepOnDevice:
    """Moves nothing: ``param_data`` and ``grad_data`` keep their device storage."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def offload(self, models: list[Any]) -> None:
        pass

    def load(self, models: list[Any]) -> None:
        pass


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """Nothing reaches the host."""
    return []


STRATEGY = ModelStrategyInfo(
    name="none",
    summary="parameters stay on the device (optimizer offload alone)",
    factory=KeepOnDevice,
    host_events=host_events,
    emulation="moves nothing",
    moves_params=False,
    engines=(),  # any engine: it moves nothing
)
