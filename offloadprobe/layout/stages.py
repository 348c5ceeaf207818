"""A model's per-rank megatron-core DDP buffers, stage by stage, and which stages share a node.

For ``use_distributed_optimizer=True`` megatron-core groups a rank's parameters into one
buffer per ``(param_dtype, grad_dtype)``, split into dense ``buffers`` and
``expert_parallel_buffers`` (params with ``allreduce=False``: experts when ep > 1 or,
since 0.19, when the expert tensor-parallel size differs from tp; 0.16.1 keeps experts
dense whenever ep = 1, which moves only bucket padding). ``grad_dtype`` is fp32 when
``grad_reduce_in_fp32`` else the param dtype. Dense buffers are padded and sharded over
the data-parallel size, expert buffers over the expert-data-parallel size.

The parts live in their own modules: ``inputs`` (shape, parallelism, DDP options),
``parameters`` (the tensors of a stage), ``buffers`` (padding and buckets) and
``optimizer_state`` (Adam state per shard). Context parallelism is 1; the expert
tensor-parallel size is ``Parallelism.expert_tp`` (1 unless set).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from offloadprobe.layout.buffers import (
    BUCKET_ALIGN,
    PARAM_ALIGN,
    BufferKind,
    BufferLayout,
    bucket_end_divisor,
    effective_bucket_size,
    lay_out_buffer,
)
from offloadprobe.layout.inputs import (
    DTYPE_BYTES,
    DdpOptions,
    GptShape,
    ModelSpec,
    Parallelism,
)
from offloadprobe.layout.parameters import (
    ParamEntry,
    count_stage_parameters,
    gpt_stage_parameters,
    stage_layer_counts,
)
from offloadprobe.layout.terms import Term


@dataclass(frozen=True, kw_only=True, slots=True)
class StageLayout:
    """The buffers of one rank of pipeline stage ``pp_rank`` (all its ranks are alike)."""

    pp_rank: int
    num_layers: int
    buffers: tuple[BufferLayout, ...]
    terms: tuple[Term, ...]

    @property
    def param_bytes(self) -> int:
        return sum(b.param_bytes for b in self.buffers)

    @property
    def grad_bytes(self) -> int:
        return sum(b.grad_bytes for b in self.buffers)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelLayout:
    """Buffers per pipeline stage, and which stages share each node."""

    parallelism: Parallelism
    stages: tuple[StageLayout, ...]
    node_stages: tuple[tuple[tuple[int, int], ...], ...]
    """Per node: ``(pp_rank, ranks of that stage on the node)``; megatron's default
    rank order puts tp innermost and pp outermost."""

    @property
    def ranks_per_node(self) -> int:
        return self.parallelism.gpus_per_node

    def per_node(self, per_rank: Sequence[int]) -> tuple[int, ...]:
        """Sum a per-stage, per-rank quantity over each node's ranks."""
        return tuple(sum(per_rank[s] * n for s, n in node) for node in self.node_stages)


# ---------------------------------------------------------------- the layout


def lay_out_model(model: ModelSpec, par: Parallelism, ddp: DdpOptions | None = None) -> ModelLayout:
    """Every pipeline stage's buffers for ``model`` under ``par``.

    Inputs and result are frozen, so a layout is computed once per process and shared (a
    235B MoE model has some 700,000 parameters to place; ``plan`` and a scenario's checks
    ask for the same layout several times)."""
    return _lay_out_model(model, par, ddp or DdpOptions())


@functools.lru_cache(maxsize=32)
def _lay_out_model(model: ModelSpec, par: Parallelism, ddp: DdpOptions) -> ModelLayout:
    stages = []
    for pp_rank in range(par.pp):
        if isinstance(model, GptShape):
            params = gpt_stage_parameters(model, par, pp_rank)
            layers = stage_layer_counts(model.num_layers, par)[pp_rank]
        else:
            params, layers = count_stage_parameters(model, par), 0
        stages.append(_lay_out_stage(params, par, ddp, pp_rank, layers))
    return ModelLayout(parallelism=par, stages=tuple(stages), node_stages=_node_stages(par))


def _lay_out_stage(
    params: Sequence[ParamEntry], par: Parallelism, ddp: DdpOptions, pp_rank: int, layers: int
) -> StageLayout:
    split = par.separate_expert_buffers
    groups: list[tuple[BufferKind, list[ParamEntry], int]] = [
        ("dense", [p for p in params if not (split and p.expert)], par.dp),
        ("expert", [p for p in params if split and p.expert], par.expert_dp),
    ]
    bucket_size = effective_bucket_size(ddp, par.dp, pp_rank)
    buffers = tuple(
        lay_out_buffer(group, kind=kind, dp_size=dp, bucket_size=bucket_size, ddp=ddp)
        for kind, group, dp in groups
        if group
    )
    terms = [
        Term(
            label="layers on this stage",
            formula=_split_formula(par, pp_rank),
            value=layers,
            unit="layers",
        )
    ]
    for (kind, group, dp), buffer in zip([g for g in groups if g[1]], buffers, strict=True):
        terms += _buffer_terms(kind, group, buffer, dp, bucket_size, ddp)
    return StageLayout(pp_rank=pp_rank, num_layers=layers, buffers=buffers, terms=tuple(terms))


def _buffer_terms(
    kind: BufferKind,
    group: Sequence[ParamEntry],
    buffer: BufferLayout,
    dp: int,
    bucket_size: int | None,
    ddp: DdpOptions,
) -> list[Term]:
    by_component: dict[str, tuple[ParamEntry, int]] = {}
    for p in group:
        key = _component(p.name)
        entry, count = by_component.get(key, (p, 0))
        by_component[key] = (entry, count + 1)
    terms = [
        Term(
            label=f"{kind}: {key}",
            formula=f"{count} x {entry.formula}",
            value=count * entry.numel,
            unit="elements",
        )
        for key, (entry, count) in by_component.items()
    ]
    divisor = bucket_end_divisor(dp, ddp.pad_buckets_for_high_nccl_busbw)
    buckets = "one bucket" if bucket_size is None else f"buckets of >= {bucket_size}"
    pw, gw = DTYPE_BYTES[buffer.param_dtype], DTYPE_BYTES[buffer.grad_dtype]
    return [
        *terms,
        Term(
            label=f"{kind}: padding",
            formula=f"params start at multiples of {PARAM_ALIGN}; "
            f"{buckets} end at multiples of lcm(dp={dp}, {BUCKET_ALIGN}"
            f"{', 2**16' if ddp.pad_buckets_for_high_nccl_busbw else ''}) = {divisor}",
            value=buffer.numel - sum(p.numel for p in group),
            unit="elements",
        ),
        Term(
            label=f"{kind}: buffer numel",
            formula="params + padding",
            value=buffer.numel,
            unit="elements",
        ),
        Term(
            label=f"{kind}: param_data bytes",
            formula=f"{buffer.numel} x {pw} ({buffer.param_dtype})",
            value=buffer.param_bytes,
        ),
        Term(
            label=f"{kind}: grad_data bytes",
            formula=f"{buffer.numel} x {gw} ({buffer.grad_dtype})",
            value=buffer.grad_bytes,
        ),
    ]


def _component(name: str) -> str:
    parts = name.split(".")
    return ".".join("*" if part.isdigit() else part for part in parts)


def _split_formula(par: Parallelism, pp_rank: int) -> str:
    if par.first_stage_layers is None and par.last_stage_layers is None:
        return f"num_layers / pp={par.pp}"
    return (
        f"first={par.first_stage_layers}, last={par.last_stage_layers}, "
        f"the rest split evenly; stage {pp_rank}"
    )


def _node_stages(par: Parallelism) -> tuple[tuple[tuple[int, int], ...], ...]:
    per_stage = par.tp * par.dp
    nodes = []
    for node in range(par.world_size // par.gpus_per_node):
        counts: dict[int, int] = {}
        for rank in range(node * par.gpus_per_node, (node + 1) * par.gpus_per_node):
            counts[rank // per_stage] = counts.get(rank // per_stage, 0) + 1
        nodes.append(tuple(sorted(counts.items())))
    return tuple(nodes)
