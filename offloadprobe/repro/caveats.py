"""What a scaled run on this host cannot show, said before it runs.

A host outcome can rest on PyTorch's pinned allocator rounding each block up to a power
of two, which a host without CUDA does not have (nothing is pinned in CPU emulation); a
GPU outcome can rest on the caching allocator's 2 MiB segments, which CPU emulation does
not round to. ``caveats`` projects each expected strategy's scaled run (``plan.probe``:
the same allocations the strategy makes, replayed) on this device and on CUDA, and where
this device's projection contradicts the expectation says why, before any child starts,
with a ``[repro] payload`` that is projected to reproduce every outcome here if there is
one. A strategy that declares no host allocations (the user's) is not projected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from offloadprobe.core.config import ModelConfig, size_for_payload
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import format_bytes
from offloadprobe.scenarios.scenario import Expectation, Scenario

MiB = 2**20
GPU_SEGMENT = 2 * MiB
"""The CUDA caching allocator's small segment: a GPU margin under it rests on rounding."""
CLEAR = 0.05
"""A suggested payload's projections clear the scaled limit by this fraction (and 2 MiB)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Projected:
    strategy: str
    expected: str
    peak: int
    cuda_peak: int
    limit: int

    def outcome(self, peak: int) -> str:
        return "oom" if peak > self.limit else "ok"


def _projectable(strategy: str) -> bool:
    from offloadprobe.core.registry import is_user_spec
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    if is_user_spec(strategy) or strategy not in MODEL_STRATEGIES:
        return False
    return MODEL_STRATEGIES.get(strategy).host_events is not None


def _host(
    s: Scenario, model: ModelConfig, host: Sequence[Expectation], emulated: bool, cycles: int
) -> list[_Projected]:
    from offloadprobe.plan.probe import project_probe
    from offloadprobe.repro.scaling import host_scaling

    limit = host_scaling(s, model).limit
    return [
        _Projected(
            strategy=e.strategy,
            expected=e.outcome,
            peak=project_probe(model, e.strategy, emulated=emulated, cycles=cycles),
            cuda_peak=project_probe(model, e.strategy, emulated=False, cycles=cycles),
            limit=limit,
        )
        for e in host
    ]


def _clears(p: _Projected) -> bool:
    margin = max(2 * MiB, int(CLEAR * p.limit))
    return p.peak >= p.limit + margin if p.expected == "oom" else p.peak <= p.limit - margin


def _payload_that_works(
    s: Scenario, host: Sequence[Expectation], emulated: bool, cycles: int
) -> int | None:
    """The ``[repro] payload`` nearest the scenario's whose projections clear the scaled
    limit the expected way for every host expectation here (None: no such payload)."""
    assert s.repro is not None
    start = s.repro.payload
    candidates = sorted(range(LOWEST, _highest(s) + 1, 2 * MiB), key=lambda p: abs(p - start))
    for payload in candidates:
        try:
            model = size_for_payload(ModelConfig(), payload)
            projected = _host(s, model, host, emulated, cycles)
        except UsageError:
            continue
        if all(_clears(p) for p in projected):
            return payload
    return None


LOWEST = 8 * MiB


def _highest(s: Scenario) -> int:
    """The largest payload searched: twice the scenario's, at least 128 MiB."""
    return max(2 * (s.repro.payload if s.repro else 0), 128 * MiB)


def _payload_words(payload: int) -> str:
    return f'[repro] payload = "{payload // MiB}MiB"'


def caveats(
    s: Scenario,
    model: ModelConfig,
    expectations: Sequence[Expectation],
    *,
    device: str,
    cycles: int,
) -> list[str]:
    """One line per expected outcome this host is projected not to reproduce, with why
    and what would (empty: nothing to say)."""
    emulated = device == "cpu"
    lines: list[str] = []
    host = [
        e
        for e in expectations
        if e.kind == "params"
        and s.limit.host_memory_per_node is not None
        and _projectable(e.strategy)
    ]
    missed = [p for p in _host(s, model, host, emulated, cycles) if p.outcome(p.peak) != p.expected]
    if missed:
        found = _payload_that_works(s, host, emulated, cycles)
        searched = f"from {format_bytes(LOWEST)} to {format_bytes(_highest(s))}"
        lines += [_host_line(p, emulated, found, searched) for p in missed]
    if emulated:
        lines += _gpu_lines(s, model, [e for e in expectations if e.kind == "optimizer"])
    return lines


def _host_line(p: _Projected, emulated: bool, payload: int | None, searched: str) -> str:
    side = "over" if p.peak > p.limit else "under"
    here = (
        f"{p.strategy} is expected {p.expected}, and its scaled run is projected "
        f"{p.outcome(p.peak)} here: host peak {format_bytes(p.peak)}, {side} the scaled limit "
        f"{format_bytes(p.limit)}"
    )
    rounding = emulated and p.outcome(p.cuda_peak) == p.expected
    if rounding:
        cuda_side = "over" if p.cuda_peak > p.limit else "under"
        here += (
            f" (on CUDA {format_bytes(p.cuda_peak)}, {cuda_side} it): the outcome rests on "
            "pinned-memory rounding to a power of two, and this host has no CUDA, so nothing "
            "is pinned"
        )
    if payload is not None:
        fix = f"{_payload_words(payload)} is projected to reproduce every outcome here"
        return here + f"; {fix}" + (", or run it on a CUDA host" if rounding else "")
    if rounding:
        return here + f"; run it on a CUDA host (no [repro] payload {searched} reproduces it here)"
    return (
        here + f"; no [repro] payload {searched} is projected to reproduce every outcome on this "
        "device"
    )


def _gpu_lines(s: Scenario, model: ModelConfig, optimizers: Sequence[Expectation]) -> list[str]:
    """CPU emulation judges what a strategy leaves on the device in exact bytes; a margin
    under one allocator segment would go the other way on a GPU."""
    from offloadprobe.plan.probe import probe_stage
    from offloadprobe.plan.projection import gpu_kept
    from offloadprobe.repro.scaling import gpu_scaling

    if not optimizers or s.limit.gpu_memory_per_device is None:
        return []
    headroom = gpu_scaling(s, model).headroom
    lines = []
    for e in optimizers:
        if not _projectable_optimizer(e.strategy):
            continue
        kept, _ = gpu_kept(e.strategy, probe_stage(model), s)
        if abs(headroom - kept) < GPU_SEGMENT:
            lines.append(
                f"{e.strategy} is expected {e.outcome}, and what its scaled run leaves on the "
                f"device ({format_bytes(kept)}) is within one CUDA allocator segment (2 MiB) of "
                f"the scaled headroom ({format_bytes(headroom)}): CPU emulation counts exact "
                "bytes, a GPU rounds them, so the outcome may differ here; run it on a CUDA host"
            )
    return lines


def _projectable_optimizer(strategy: str) -> bool:
    from offloadprobe.core.registry import is_user_spec
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES

    if is_user_spec(strategy) or strategy not in OPTIMIZER_STRATEGIES:
        return False
    return OPTIMIZER_STRATEGIES.get(strategy).moved_keys is not None
