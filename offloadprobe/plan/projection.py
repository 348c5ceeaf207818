"""Project a scenario to full scale: host and GPU bytes per rank and per node, by strategy.

Nothing runs here. Host bytes of the model strategies come from replaying, through
``plan.pinned``'s model of PyTorch's pinned caching allocator, the allocation sequence
each offloadprobe strategy performs (:func:`param_events`), buffer by buffer, cycle by
cycle. Optimizer state comes from ``plan.optimizer_state``. Every figure carries its
terms (label, formula, value) so the arithmetic can be checked by hand.

A node's figure adds its ranks' figures: every rank offloads in the same step, so their
peaks coincide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from offloadprobe.core.errors import UsageError
from offloadprobe.layout.inputs import DTYPE_BYTES
from offloadprobe.layout.optimizer_state import OptimizerOptions, optimizer_state
from offloadprobe.layout.pinned import (
    PAGE_LOCKED,
    Alloc,
    Event,
    HostKind,
    Replay,
    page_rounded,
    pinned_block_size,
    replay,
)
from offloadprobe.layout.stages import StageLayout
from offloadprobe.layout.terms import Term
from offloadprobe.plan.rank_replay import NO_OPTIMIZER_MOVES, OptimizerMoves
from offloadprobe.scenarios.schema import Scenario, strategy_kind

Outcome = Literal["oom", "ok"]

PAIRED_MODEL_STRATEGY = "lazy"
"""The model strategy an optimizer strategy is projected with (the field's fix)."""
PAIRED_OPTIMIZER_STRATEGY = "complete"
"""The optimizer strategy a model strategy is projected with (everything moved, exactly)."""


# ---------------------------------------------------------------- host: model strategies


def buffer_labels(stage: StageLayout) -> list[str]:
    """``dense`` / ``expert`` names for a stage's buffers, numbered when a kind repeats."""
    kinds = [b.kind for b in stage.buffers]
    return [k if kinds.count(k) == 1 else f"{k} {i}" for i, k in enumerate(kinds)]


def param_events(
    strategy: str, payloads: Sequence[int], cycles: int, labels: Sequence[str] | None = None
) -> list[Event]:
    """The host allocations and frees of ``cycles`` offloads of buffers of ``payloads`` bytes,
    as the strategy's descriptor declares them (loads allocate no host memory)."""
    from offloadprobe.engine.strategies import model_strategy

    names = list(labels) if labels is not None else [f"buffer {b}" for b in range(len(payloads))]
    info = model_strategy(strategy)
    if info.host_events is None:
        raise UsageError(
            f"model strategy {strategy!r} declares no host allocations, so plan cannot "
            "project it: give its descriptor host_events, or measure it with offloadprobe run"
        )
    return info.host_events(payloads, cycles, names)


@dataclass(frozen=True, kw_only=True, slots=True)
class RankHost:
    """One model strategy's host bytes on one rank (one pipeline stage)."""

    strategy: str
    pp_rank: int
    peak: int
    steady: int
    """Resident after the last offload (cached pinned blocks included)."""
    pinned: int
    """Page-locked bytes after the last offload: PyTorch's pinned blocks (in use and
    cached) or ranges registered with ``cudaHostRegister``."""
    terms: tuple[Term, ...]


def _holding_terms(prefix: str, replayed: Replay, which: str) -> list[Term]:
    holdings = replayed.peak_holdings if which == "peak" else replayed.final_holdings
    return [Term(label=f"{prefix}  {h.name}", formula=h.kind, value=h.nbytes) for h in holdings]


def rank_host(strategy: str, stage: StageLayout, cycles: int) -> RankHost:
    """Replay ``cycles`` offloads of ``stage``'s param_data buffers under ``strategy``."""
    labels = buffer_labels(stage)
    payloads = [b.param_bytes for b in stage.buffers]
    events = param_events(strategy, payloads, cycles, labels)
    replayed = replay(events)
    terms: list[Term] = []
    for label, buffer in zip(labels, stage.buffers, strict=True):
        width = DTYPE_BYTES[buffer.param_dtype]
        terms.append(
            Term(
                label=f"{label} param_data",
                formula=f"{buffer.numel} x {width} ({buffer.param_dtype})",
                value=buffer.param_bytes,
            )
        )
        if any(isinstance(e, Alloc) and e.kind == "pinned" for e in events):
            terms.append(
                Term(
                    label=f"{label} pinned block (rounding)",
                    formula=f"PowerOf2Ceil({buffer.param_bytes})",
                    value=pinned_block_size(buffer.param_bytes),
                )
            )
    peak_step = replayed.steps[replayed.peak_index] if replayed.steps else None
    when = (
        f"after event {replayed.peak_index + 1} of {len(replayed.steps)}"
        if peak_step
        else "nothing allocated"
    )
    terms.append(
        Term(label="host peak", formula=f"sum of what is resident {when}", value=replayed.peak)
    )
    terms += _holding_terms("", replayed, "peak")
    terms.append(
        Term(label="steady host", formula=f"resident after offload {cycles}", value=replayed.final)
    )
    terms += _holding_terms("", replayed, "final")
    pinned = sum(h.nbytes for h in replayed.final_holdings if h.kind in PAGE_LOCKED)
    terms.append(Term(label="pinned", formula="pinned, cached and registered above", value=pinned))
    return RankHost(
        strategy=strategy,
        pp_rank=stage.pp_rank,
        peak=replayed.peak,
        steady=replayed.final,
        pinned=pinned,
        terms=tuple(terms),
    )


# ---------------------------------------------------------------- optimizer state


def optimizer_bytes(stage: StageLayout, opt: OptimizerOptions) -> tuple[int, int]:
    """(all Adam state, precision-aware ``master_param``) bytes of one rank of ``stage``."""
    states = [optimizer_state(b, opt) for b in stage.buffers]
    master = sum(s.master_param_bytes for s in states) if opt.precision_aware else 0
    return sum(s.total_bytes for s in states), master


def moved_keys(strategy: str, opt: OptimizerOptions) -> tuple[str, ...]:
    """Which optimizer tensors ``strategy`` moves to the host, from its descriptor
    (``master``: the fp32 master weights, ``exp_avg``, ``exp_avg_sq``)."""
    info = _optimizer_info(strategy)
    return tuple(info.moved_keys(opt.precision_aware))


def _optimizer_info(strategy: str) -> Any:
    from offloadprobe.engine.optimizer.strategies import optimizer_strategy

    info = optimizer_strategy(strategy)
    if info.moved_keys is None:
        raise UsageError(
            f"optimizer strategy {strategy!r} declares neither moved_keys nor host_copy, so "
            "plan cannot project it: measure it with offloadprobe run"
        )
    return info


def _key_dtypes(stage: StageLayout, opt: OptimizerOptions, key: str) -> list[str | None]:
    if key == "master":
        return [opt.master_dtype(b.param_dtype) for b in stage.buffers]
    return [opt.exp_avg_dtype if key == "exp_avg" else opt.exp_avg_sq_dtype] * len(stage.buffers)


def optimizer_host(
    strategy: str, stage: StageLayout, opt: OptimizerOptions, *, emulated: bool = False
) -> tuple[int, Term]:
    """Host bytes one rank holds for optimizer state moved by ``strategy``.

    ``complete`` copies each state tensor into an exact-size host buffer (page rounding,
    at most 4 KiB per tensor, is not counted). ``legacy``/``fixed`` move each tensor with
    ``.to("cpu", non_blocking=True)``, which on CUDA returns a pinned tensor from
    PyTorch's caching allocator: one rounded block per per-parameter shard tensor, kept
    in the cache across loads and reused by the next offload. The worst data-parallel
    rank is taken.

    ``emulated`` (CPU emulation): nothing is pinned, so every strategy's copy of a tensor
    is an ordinary host allocation of its bytes, page-rounded, per tensor.
    """
    keys = moved_keys(strategy, opt)
    host_copy = _optimizer_info(strategy).host_copy
    if not keys or host_copy == "nothing":
        return 0, Term(label=f"optimizer on host ({strategy})", formula="nothing moved", value=0)
    if emulated:
        host_copy = "pageable per tensor"
    if host_copy == "exact":
        total, _ = optimizer_bytes(stage, opt)
        return total, Term(
            label=f"optimizer on host ({strategy})",
            formula="master + exp_avg + exp_avg_sq of the largest shard, exact size",
            value=total,
        )
    block = pinned_block_size if host_copy == "pinned per tensor" else page_rounded
    worst = sum(block(n) for n in _worst_tensors(stage, opt, keys, block))
    return worst, Term(
        label=f"optimizer on host ({strategy})",
        formula=f"sum of {block.__name__}(bytes) over every per-parameter tensor of "
        f"{', '.join(keys)} ({host_copy})",
        value=worst,
    )


def _worst_tensors(
    stage: StageLayout, opt: OptimizerOptions, keys: Sequence[str], block: Any
) -> list[int]:
    """Bytes of every per-parameter state tensor of ``keys`` on the data-parallel rank
    that holds the most (by ``block``'s accounting), buffer by buffer."""
    out: list[int] = []
    for buffer_index, buffer in enumerate(stage.buffers):
        per_rank = []
        for dp_rank in range(buffer.dp_size):
            pieces = buffer.shard_pieces(dp_rank)
            tensors = []
            for key in keys:
                dtype = _key_dtypes(stage, opt, key)[buffer_index]
                if dtype is not None:
                    tensors += [n * DTYPE_BYTES[dtype] for n in pieces]
            per_rank.append((sum(block(n) for n in tensors), tensors))
        out += max(per_rank, key=lambda r: r[0])[1]
    return out


def optimizer_moves(
    strategy: str, stage: StageLayout, opt: OptimizerOptions, *, emulated: bool = False
) -> OptimizerMoves:
    """The host copies ``strategy`` makes and drops, for replaying it beside the model
    strategy (:mod:`offloadprobe.plan.rank_replay`); the same tensors as
    :func:`optimizer_host`. ``.to("cpu")`` strategies (legacy, fixed) make a fresh copy
    per tensor every offload, pinned on CUDA, and drop it on load; ``complete`` makes its
    exact-size buffers once (registered on CUDA) and keeps them."""
    keys = moved_keys(strategy, opt)
    host_copy = _optimizer_info(strategy).host_copy
    if not keys or host_copy == "nothing":
        return NO_OPTIMIZER_MOVES
    kept = host_copy == "exact"
    if emulated:
        tensors = _worst_tensors(stage, opt, keys, page_rounded)
        return OptimizerMoves(tensors=tuple(tensors), kind="pageable", kept=kept)
    if kept:
        return OptimizerMoves(
            tensors=(optimizer_bytes(stage, opt)[0],), kind="registered", kept=True
        )
    kind: HostKind = "pinned" if host_copy == "pinned per tensor" else "pageable"
    block = pinned_block_size if kind == "pinned" else page_rounded
    return OptimizerMoves(
        tensors=tuple(_worst_tensors(stage, opt, keys, block)), kind=kind, kept=False
    )


def gpu_kept(strategy: str, stage: StageLayout, s: Scenario) -> tuple[int, list[Term]]:
    """Device bytes one rank of ``stage`` keeps after offload with optimizer ``strategy``."""
    state, master = optimizer_bytes(stage, s.offload.optimizer_options)
    terms = []
    if not s.offload.optimizer:
        kept = state
        terms.append(
            Term(label="optimizer state (not offloaded)", formula="all state", value=state)
        )
    else:
        keys = moved_keys(strategy, s.offload.optimizer_options)
        kept = state if not keys else (master if "master" not in keys else 0)
        what = "nothing moved" if not keys else f"moves {', '.join(keys)}"
        terms.append(Term(label=f"optimizer state left by {strategy}", formula=what, value=kept))
    if not s.offload.params:
        kept += stage.param_bytes
        terms.append(
            Term(label="param_data (not offloaded)", formula="all buffers", value=stage.param_bytes)
        )
    if not s.offload.grads:
        kept += stage.grad_bytes
        terms.append(
            Term(label="grad_data (not offloaded)", formula="all buffers", value=stage.grad_bytes)
        )
    return kept, terms


# ---------------------------------------------------------------- per node / per device


def _node_total(s: Scenario, per_stage: Sequence[int]) -> tuple[int, int]:
    """(largest per-node sum of ``per_stage`` rank values, index of that node)."""
    totals = s.layout().per_node(per_stage)
    index = max(range(len(totals)), key=totals.__getitem__)
    return totals[index], index


def host_peak_per_node(s: Scenario, params: str, optimizer: str, cycles: int = 3) -> int:
    """Host bytes of the worst node: every rank's param copies and optimizer state, plus
    what the node reserves for other things."""
    per_rank = []
    for stage in s.layout().stages:
        total = rank_host(params, stage, cycles).peak if s.offload.params else 0
        if s.offload.optimizer:
            total += optimizer_host(optimizer, stage, s.offload.optimizer_options)[0]
        per_rank.append(total)
    return _node_total(s, per_rank)[0] + s.limit.host_reserved_per_node


def gpu_left_per_device(s: Scenario, optimizer: str) -> int:
    """Device bytes of the worst rank while the next phase runs: what the offload left
    plus what that phase claims (``gpu_reserved_per_device``)."""
    left = [gpu_kept(optimizer, stage, s)[0] for stage in s.layout().stages]
    return max(left) + s.limit.gpu_reserved_per_device


def predicted(s: Scenario, strategy: str, kind: str | None = None) -> Outcome:
    """``oom`` or ``ok`` for ``strategy`` of ``kind`` (model strategies pair with
    ``PAIRED_OPTIMIZER_STRATEGY``, optimizer strategies with ``PAIRED_MODEL_STRATEGY``)."""
    kind = kind or strategy_kind(strategy)
    params, optimizer = (
        (strategy, PAIRED_OPTIMIZER_STRATEGY)
        if kind == "params"
        else (PAIRED_MODEL_STRATEGY, strategy)
    )
    cycles = s.repro.cycles if s.repro else 3
    host, gpu = s.limit.host_memory_per_node, s.limit.gpu_memory_per_device
    if host is not None and host_peak_per_node(s, params, optimizer, cycles) > host:
        return "oom"
    if gpu is not None and gpu_left_per_device(s, optimizer) > gpu:
        return "oom"
    return "ok"
