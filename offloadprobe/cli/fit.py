"""Refuse a run that cannot fit in host memory, before anything is built (``--force``
overrides)."""

from __future__ import annotations

from typing import Any

import psutil

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import format_bytes
from offloadprobe.measure.cgroup import own_group


def _cgroup_limit() -> tuple[int, int] | None:
    """(limit, usage) of this process's memory cgroup, or None without a limit."""
    group = own_group()
    limit = group.limit() if group is not None else None
    if group is None or limit is None:
        return None
    try:
        return limit, group.usage()
    except (OSError, ValueError, IndexError):
        return None


def available_host_bytes() -> tuple[int, str]:
    """Host bytes a run in this process may still use, and where the figure comes from.

    The process's own RSS is added back: the estimate counts the process itself.
    """
    own = psutil.Process().memory_info().rss
    mem_available = psutil.virtual_memory().available
    cgroup = _cgroup_limit()
    if cgroup is not None:
        limit, usage = cgroup
        free = min(limit - usage, mem_available)
        return free + own, f"cgroup limit {format_bytes(limit)}, {format_bytes(usage)} in use"
    return mem_available + own, "MemAvailable"


def check_fits(
    model: ModelConfig,
    *,
    strategies: list[tuple[str, str]],
    optimizer: OptimizerChoice,
    device: str,
    force: bool,
    ranks: int = 1,
    model_parallel: int = 1,
    load_user: bool = True,
) -> Any:
    """The largest footprint of the (strategy, optimizer strategy) pairs; ``UsageError``
    when it exceeds what this process may use, unless ``force``. ``load_user=False``:
    a user's spec is not imported here (the estimate takes it at 2 x payload anyway)."""
    from offloadprobe.plan.footprint import estimate

    worst = max(
        (
            estimate(
                model,
                strategy=s,
                optimizer_strategy=o,
                optimizer=optimizer,
                device=device,
                load_user=load_user,
            )
            for s, o in strategies
        ),
        key=lambda f: f.total_bytes,
    )
    if force:
        return worst
    available, source = available_host_bytes()
    # Several ranks on this node: each holds 1/model_parallel of the model (tp x pp x cp).
    need = worst.total_bytes * ranks // model_parallel
    if need <= available:
        return worst
    where = "CPU emulation: the emulated device is host memory too" if device == "cpu" else device
    shown = ", ".join(f"{t.label} {format_bytes(t.value)}" for t in worst.terms[:-1] if t.value)
    largest = worst.largest_payload(available * model_parallel // ranks, device=device)
    who = f"{ranks} ranks" if ranks > 1 else where
    raise UsageError(
        f"this run needs about {format_bytes(need)} of host memory ({who}: "
        f"{shown}) but this process may use {format_bytes(available)} ({source}); the largest "
        f"payload that fits is about {format_bytes(largest)}: lower --payload, or pass --force "
        "to run anyway"
    )
