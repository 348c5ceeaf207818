"""``fixed``: the pre-fix pattern plus ``master_param`` (verl PR 6635's fix)."""

from __future__ import annotations

from offloadprobe.engine.optimizer.strategies.base import StateKeyStrategy


class FixedStrategy(StateKeyStrategy):
    """fp32 groups plus ``exp_avg``, ``exp_avg_sq`` and ``master_param``, moved with ``.to``."""

    state_keys = ("exp_avg", "exp_avg_sq", "master_param")
