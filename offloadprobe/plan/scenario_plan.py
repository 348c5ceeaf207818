"""``project_scenario(s)``: every strategy of a scenario projected to full scale, with terms.

Model strategies are projected with the optimizer state offloaded by ``complete`` (exact
size) and optimizer strategies with the parameters offloaded by ``lazy``, as
:func:`offloadprobe.plan.projection.predicted` judges them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from offloadprobe.core.records import SCHEMA_VERSION
from offloadprobe.layout.stages import ModelLayout, StageLayout
from offloadprobe.layout.terms import Term
from offloadprobe.plan.projection import (
    PAIRED_MODEL_STRATEGY,
    PAIRED_OPTIMIZER_STRATEGY,
    gpu_kept,
    optimizer_host,
    predicted,
    rank_host,
)
from offloadprobe.scenarios.schema import Scenario, optimizer_strategies, param_strategies


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyPlan:
    """One strategy at full scale: per rank, per node or device, and the verdict."""

    strategy: str
    kind: str
    """``params`` (a model strategy) or ``optimizer``."""
    per_rank: dict[str, int]
    """Figures of the worst node's largest rank (params) or the worst device (optimizer)."""
    host_per_node: int | None
    host_limit: int | None
    gpu_per_device: int | None
    gpu_limit: int | None
    outcome: str
    """``oom`` or ``ok`` (``ok`` also when the scenario sets no limit to break)."""
    expected: str | None
    terms: tuple[Term, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioPlan:
    """Everything ``offloadprobe plan SCENARIO`` prints."""

    scenario: str
    path: str
    model: str
    parallelism: dict[str, Any]
    cycles: int
    stages: list[dict[str, int]]
    layout_terms: tuple[Term, ...]
    """The buffer arithmetic of the largest stage."""
    strategies: list[StrategyPlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "plan", **asdict(self)}


def _node_terms(
    layout: ModelLayout, per_stage: list[int], what: str, reserved: int
) -> tuple[int, list[Term]]:
    totals = layout.per_node(per_stage)
    node = max(range(len(totals)), key=totals.__getitem__)
    terms = [
        Term(
            label=f"node {node}: {n} ranks of stage {pp}",
            formula=f"{n} x {per_stage[pp]} ({what})",
            value=n * per_stage[pp],
        )
        for pp, n in layout.node_stages[node]
    ]
    terms.append(
        Term(label="reserved on the node", formula="limit.host_reserved_per_node", value=reserved)
    )
    total = totals[node] + reserved
    terms.append(Term(label="host per node", formula="sum of the above (worst node)", value=total))
    return total, terms


def _largest_stage(layout: ModelLayout) -> StageLayout:
    return max(layout.stages, key=lambda st: st.param_bytes)


def _param_plan(s: Scenario, layout: ModelLayout, strategy: str, cycles: int) -> StrategyPlan:
    opt = s.offload.optimizer_options
    ranks = [rank_host(strategy, st, cycles) for st in layout.stages]
    optimizer = [
        optimizer_host(PAIRED_OPTIMIZER_STRATEGY, st, opt) if s.offload.optimizer else (0, None)
        for st in layout.stages
    ]
    per_stage = [
        (r.peak if s.offload.params else 0) + o for r, (o, _) in zip(ranks, optimizer, strict=True)
    ]
    host, node_terms = _node_terms(
        layout, per_stage, "param peak + optimizer", s.limit.host_reserved_per_node
    )
    big = _largest_stage(layout).pp_rank
    terms = [*ranks[big].terms]
    if optimizer[big][1] is not None:
        terms.append(optimizer[big][1])
    terms += node_terms
    gpu = None
    if s.limit.gpu_memory_per_device is not None:
        gpu, gpu_terms = _gpu_figure(s, layout, PAIRED_OPTIMIZER_STRATEGY)
        terms += gpu_terms
    return StrategyPlan(
        strategy=strategy,
        kind="params",
        per_rank={
            "host peak": ranks[big].peak,
            "steady host": ranks[big].steady,
            "pinned": ranks[big].pinned,
            "optimizer on host": optimizer[big][0],
        },
        host_per_node=host,
        host_limit=s.limit.host_memory_per_node,
        gpu_per_device=gpu,
        gpu_limit=s.limit.gpu_memory_per_device,
        outcome=predicted(s, strategy, "params"),
        expected=s.expected(strategy, "params"),
        terms=tuple(terms),
    )


def _gpu_figure(s: Scenario, layout: ModelLayout, strategy: str) -> tuple[int, list[Term]]:
    kept = [gpu_kept(strategy, st, s) for st in layout.stages]
    worst = max(range(len(kept)), key=lambda i: kept[i][0])
    terms = [
        *(
            Term(label=f"stage {worst}: {t.label}", formula=t.formula, value=t.value)
            for t in kept[worst][1]
        ),
        Term(
            label="next phase claims",
            formula="limit.gpu_reserved_per_device",
            value=s.limit.gpu_reserved_per_device,
        ),
    ]
    total = kept[worst][0] + s.limit.gpu_reserved_per_device
    terms.append(Term(label="GPU per device", formula="left after offload + claim", value=total))
    return total, terms


def _optimizer_plan(s: Scenario, layout: ModelLayout, strategy: str, cycles: int) -> StrategyPlan:
    opt = s.offload.optimizer_options
    gpu, terms = _gpu_figure(s, layout, strategy)
    lazy = [
        rank_host(PAIRED_MODEL_STRATEGY, st, cycles).peak if s.offload.params else 0
        for st in layout.stages
    ]
    moved = [
        optimizer_host(strategy, st, opt) if s.offload.optimizer else (0, None)
        for st in layout.stages
    ]
    per_stage = [p + m for p, (m, _) in zip(lazy, moved, strict=True)]
    big = _largest_stage(layout).pp_rank
    terms.append(
        Term(label="lazy param copies on host", formula="per rank, see lazy", value=lazy[big])
    )
    if moved[big][1] is not None:
        terms.append(moved[big][1])
    host, node_terms = _node_terms(
        layout, per_stage, "lazy params + optimizer", s.limit.host_reserved_per_node
    )
    terms += node_terms
    return StrategyPlan(
        strategy=strategy,
        kind="optimizer",
        per_rank={
            "GPU left after offload": gpu - s.limit.gpu_reserved_per_device,
            "optimizer on host": moved[big][0],
        },
        host_per_node=host,
        host_limit=s.limit.host_memory_per_node,
        gpu_per_device=gpu,
        gpu_limit=s.limit.gpu_memory_per_device,
        outcome=predicted(s, strategy, "optimizer"),
        expected=s.expected(strategy, "optimizer"),
        terms=tuple(terms),
    )


def project_scenario(s: Scenario) -> ScenarioPlan:
    """Project every model and optimizer strategy of ``s`` to full scale."""
    layout = s.layout()
    cycles = s.repro.cycles if s.repro else 3
    par = s.parallelism
    plan = ScenarioPlan(
        scenario=s.name,
        path=str(s.path),
        model=s.model.name or type(s.model.spec).__name__,
        parallelism={
            "tp": par.tp,
            "pp": par.pp,
            "ep": par.ep,
            "dp": par.dp,
            "expert_dp": par.expert_dp,
            "gpus_per_node": par.gpus_per_node,
            "nodes": par.world_size // par.gpus_per_node,
        },
        cycles=cycles,
        stages=[
            {
                "pp_rank": st.pp_rank,
                "layers": st.num_layers,
                "param_bytes": st.param_bytes,
                "grad_bytes": st.grad_bytes,
            }
            for st in layout.stages
        ],
        layout_terms=_largest_stage(layout).terms,
        notes=[
            f"host peaks replay {cycles} offload cycles through PyTorch's pinned allocator "
            "model (power-of-two blocks, freed blocks cached); a node adds its ranks' peaks "
            "(they offload in the same step)",
            "model strategies are shown with the optimizer state offloaded by complete "
            "(exact size), optimizer strategies with the parameters offloaded by lazy",
        ],
    )
    plan.strategies.extend(_param_plan(s, layout, k, cycles) for k in param_strategies("megatron"))
    if s.offload.optimizer or any(e.kind == "optimizer" for e in s.expect):
        plan.strategies.extend(
            _optimizer_plan(s, layout, k, cycles) for k in optimizer_strategies("megatron")
        )
    return plan
