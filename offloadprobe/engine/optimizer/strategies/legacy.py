"""``legacy``: the pre-fix optimizer offload, ``exp_avg`` and ``exp_avg_sq`` only.

With the precision-aware optimizer the fp32 master weights (or int16 remainders) live in
the optimizer state under ``master_param``; this pattern never moves them, so they stay
on the GPU (verl before PR 6635, ISEEKYAN/Megatron-LM #232).
"""

from __future__ import annotations

from offloadprobe.engine.descriptors import OptimizerStrategyInfo
from offloadprobe.engine.optimizer.state_moves import StateKeyStrategy


class LegacyStrategy(StateKeyStrategy):
    """fp32 groups plus ``exp_avg``/``exp_avg_sq``, moved with ``.to``; not ``master_param``."""

    state_keys = ("exp_avg", "exp_avg_sq")


def moved_keys(precision_aware: bool) -> tuple[str, ...]:
    """The moments always; the fp32 master weights only where they are a group (classic)."""
    return ("exp_avg", "exp_avg_sq") if precision_aware else ("master", "exp_avg", "exp_avg_sq")


STRATEGY = OptimizerStrategyInfo(
    name="legacy",
    summary="Adam moments and fp32 groups by .to(); master_param stays (pre-fix)",
    factory=LegacyStrategy,
    moved_keys=moved_keys,
    host_copy="pinned per tensor",
    emulation="each .to('cpu') makes an ordinary host copy",
)
