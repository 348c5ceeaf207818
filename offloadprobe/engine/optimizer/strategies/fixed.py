"""``fixed``: the pre-fix pattern plus ``master_param`` (verl PR 6635's fix)."""

from __future__ import annotations

from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engine.optimizer.state_moves import StateKeyStrategy


class FixedStrategy(StateKeyStrategy):
    """fp32 groups plus ``exp_avg``, ``exp_avg_sq`` and ``master_param``, moved with ``.to``."""

    state_keys = ("exp_avg", "exp_avg_sq", "master_param")


STRATEGY = OptimizerStrategyInfo(
    name="fixed",
    summary="legacy plus master_param (verl PR 6635's fix)",
    factory=FixedStrategy,
    moved_keys=lambda precision_aware: ("master", "exp_avg", "exp_avg_sq"),
    host_copy="pinned per tensor",
    emulation="each .to('cpu') makes an ordinary host copy",
)
