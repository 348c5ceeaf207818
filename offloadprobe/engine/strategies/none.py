"""``none``: model parameters stay on the device (to measure optimizer offload alone)."""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.runtime import Runtime


class KeepOnDevice:
    """Moves nothing: ``param_data`` and ``grad_data`` keep their device storage."""

    moves_params = False

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def offload(self, models: list[Any]) -> None:
        pass

    def load(self, models: list[Any]) -> None:
        pass
