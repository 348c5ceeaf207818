"""``none``: leave every optimizer tensor where it is (the audit's reference point)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offloadprobe.engine.descriptors import OptimizerStrategyInfo

if TYPE_CHECKING:
    from offloadprobe.engine.runtime import Runtime


class NoOffload:
    """Moves nothing."""

    def __init__(self, runtime: Runtime | None = None) -> None:
        self.runtime = runtime

    def offload(self, optimizers: list[Any]) -> None:
        pass

    def load(self, optimizers: list[Any]) -> None:
        pass


STRATEGY = OptimizerStrategyInfo(
    name="none",
    summary="moves nothing",
    factory=NoOffload,
    moved_keys=lambda precision_aware: (),
    host_copy="nothing",
    emulation="moves nothing",
    engines=(),  # any engine: it moves nothing
)
