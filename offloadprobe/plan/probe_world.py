"""Project the probe model at a parallel layout: every rank's and every node's host bytes.

``offloadprobe run --nproc-per-node N --tp/--pp/--ep/--vpp`` builds the probe
(``plan.probe``: megatron's local spec, LayerNorm with biases, learned positions, untied
output layer, 4h MLPs with biases) on each rank at megatron's layout:

- tensor parallelism shards attention, the MLP and the vocabulary, not the experts: the
  probe's MoE layers have linear biases, which megatron-core allows only with an expert
  tensor-parallel size of 1;
- every MoE layer has a router (an ``E x h`` weight and an ``E`` bias, as the probe sets
  ``add_bias_linear``; megatron-core 0.16.1 and 0.19.2 alike) and ``E / ep`` local
  experts, each as wide as the dense MLP (4h) with biases. They sit in DDP's separate
  ``expert_parallel_buffers``, sharded over the expert data-parallel group
  (``tp * dp / ep``), when ep > 1, and in megatron-core 0.19 also when tp > 1 (expert tp
  1 differs from tp); otherwise in the dense buffer;
- pipeline rank ``r`` with ``vpp`` virtual stages holds ``vpp`` model chunks, chunk ``k``
  being stage ``k * pp + r`` of a ``pp * vpp`` stage pipeline; each chunk is its own DDP
  module with its own buffers (one bucket each: no grad-reduce overlap);
- megatron's rank order puts tp innermost and pp outermost (``tp-cp-ep-dp-pp``), so rank
  ``i`` is on pipeline stage ``i // (tp * dp)``.

Per rank, both parts are replayed together in the run's phase order
(``plan.rank_replay``: on CUDA through one pinned cache, in CPU emulation as ordinary
memory) and read with the run's ledger; each part alone is kept too
(``plan.projection.rank_host`` or ``plan.probe.emulated_host``, and
``plan.projection.optimizer_host``: the scenario plan's figures). Per node, the plan's
own rule: the node's figure is the sum of its ranks' figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.layout.inputs import Parallelism
from offloadprobe.layout.optimizer_state import OptimizerOptions
from offloadprobe.layout.pinned import Alloc, Event
from offloadprobe.layout.stages import StageLayout, lay_out_model
from offloadprobe.plan.probe import PROBE_DDP, emulated_host, probe_shape
from offloadprobe.plan.projection import (
    RankHost,
    buffer_labels,
    optimizer_host,
    optimizer_moves,
    param_events,
    rank_host,
)
from offloadprobe.plan.rank_replay import RankRun, per_cycle, run_rank

_STATE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "uint8": "uint8"}


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeLayout:
    """A run's parallel sizes: ``offloadprobe run``'s flags and its rank count."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    vpp: int | None = None
    ranks_per_node: int | None = None
    """Ranks of one node (None: every rank on one node)."""
    megatron_core: str = "0.19.2"
    """The megatron-core version that builds the buffers (its expert-buffer rule)."""

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def chunks(self) -> int:
        return self.vpp or 1

    def pp_rank(self, rank: int) -> int:
        """The pipeline stage of global ``rank`` (megatron's ``tp-cp-ep-dp-pp`` order)."""
        return rank // (self.tp * self.dp)

    def parallelism(self) -> Parallelism:
        """``plan.layout``'s sizes, with the probe's expert tp (1)."""
        return Parallelism(
            tp=self.tp,
            pp=self.pp,
            ep=self.ep,
            dp=self.dp,
            expert_tp=1,
            expert_buffers_by_etp=_version(self.megatron_core) >= (0, 19),
            gpus_per_node=self.ranks_per_node or self.world_size,
        )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def optimizer_options(choice: OptimizerChoice) -> OptimizerOptions:
    """``plan.layout``'s optimizer options for the optimizer ``offloadprobe run`` builds."""
    return OptimizerOptions(
        precision_aware=choice.precision_aware,
        store_param_remainders=choice.store_param_remainders,
        exp_avg_dtype=_STATE_DTYPES[choice.exp_avg_dtype],
        exp_avg_sq_dtype=_STATE_DTYPES[choice.exp_avg_sq_dtype],
    )


def probe_rank_stages(model: ModelConfig, layout: ProbeLayout) -> tuple[StageLayout, ...]:
    """Per pipeline rank, its DDP buffers: all its chunks' buffers, chunk by chunk, dense
    before expert (``ProbeModel.buffers()``'s order)."""
    par = layout.parallelism()
    virtual = Parallelism(
        tp=par.tp,
        pp=par.pp * layout.chunks,
        ep=par.ep,
        dp=par.dp,
        expert_tp=par.expert_tp,
        expert_buffers_by_etp=par.expert_buffers_by_etp,
        gpus_per_node=1,
    )
    stages = lay_out_model(probe_shape(model), virtual, PROBE_DDP).stages
    out = []
    for pp_rank in range(layout.pp):
        chunks = [stages[k * layout.pp + pp_rank] for k in range(layout.chunks)]
        out.append(
            StageLayout(
                pp_rank=pp_rank,
                num_layers=sum(c.num_layers for c in chunks),
                buffers=tuple(b for c in chunks for b in c.buffers),
                terms=tuple(t for c in chunks for t in c.terms),
            )
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True, slots=True)
class RankProjection:
    """One rank's projected figures."""

    rank: int
    pp_rank: int
    payload_bytes: int
    """``param_data`` bytes over the rank's DDP buffers (``RunRecord.payload_bytes``)."""
    buffers: tuple[str, ...]
    """``dense``/``expert`` with each buffer's bytes, in order."""
    params: RankHost
    """The parameter strategy replayed alone (the scenario plan's figure)."""
    optimizer_host_bytes: int
    """Host bytes of the optimizer state the optimizer strategy moved, alone."""
    run: RankRun
    """Both parts replayed together in the run's order, read with the run's ledger
    (:mod:`offloadprobe.plan.rank_replay`): what ``offloadprobe run`` reports."""

    @property
    def host_peak_bytes(self) -> int:
        """Both parts together (:func:`project_rank_run`)."""
        return self.run.host_peak

    @property
    def added_peaks_bytes(self) -> int:
        """The scenario plan's per-rank rule (``projection.host_peak_per_node``): the
        parameter peak plus the optimizer state, as if they coincided."""
        return self.params.peak + self.optimizer_host_bytes

    @property
    def max_rule_bytes(self) -> int:
        """The rule before both parts were replayed together: the larger of the parameter
        peak and the parameter steady bytes plus the optimizer state. It holds where a
        part's freed copies leave the process (CPU emulation), not with PyTorch's pinned
        cache (docs/ranks.md, "plan against measurement")."""
        return max(self.params.peak, self.params.steady + self.optimizer_host_bytes)


def project_rank_run(
    strategy: str,
    optimizer_strategy: str,
    stage: StageLayout,
    opt: OptimizerOptions,
    *,
    cycles: int,
    emulated: bool,
) -> RankRun:
    """Both parts of one rank of ``stage`` replayed together, cycle by cycle, in the run's
    phase order: on CUDA through one pinned cache, in CPU emulation as ordinary memory
    (pinned and registered requests become page-rounded ``pageable`` allocations)."""
    labels = buffer_labels(stage)
    payloads = [b.param_bytes for b in stage.buffers]

    def events(n: int) -> list[Event]:
        out = param_events(strategy, payloads, n, labels)
        if emulated:
            out = [
                dataclasses.replace(e, kind="pageable") if isinstance(e, Alloc) else e for e in out
            ]
        return out

    moves = optimizer_moves(optimizer_strategy, stage, opt, emulated=emulated)
    return run_rank(per_cycle(events, cycles), moves)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeProjection:
    """One node: the sums of its ranks' figures (the plan's node rule)."""

    node_rank: int
    ranks: tuple[int, ...]
    params_peak_bytes: int
    optimizer_host_bytes: int
    host_peak_bytes: int
    """Sum of the ranks' ``host_peak_bytes`` (both parts replayed together)."""
    added_peaks_bytes: int
    """Sum of the ranks' ``added_peaks_bytes`` (the scenario plan's rule)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorldProjection:
    """Every rank and every node of the probe at one layout."""

    layout: ProbeLayout
    strategy: str
    optimizer_strategy: str
    emulated: bool
    ranks: tuple[RankProjection, ...]
    nodes: tuple[NodeProjection, ...]


def project_world(
    model: ModelConfig,
    layout: ProbeLayout,
    *,
    strategy: str,
    optimizer_strategy: str = "none",
    optimizer: OptimizerChoice | None = None,
    emulated: bool,
    cycles: int = 3,
) -> WorldProjection:
    """Project ``offloadprobe run`` of ``strategy`` + ``optimizer_strategy`` at ``layout``."""
    opt = optimizer_options(optimizer or OptimizerChoice())
    per_stage = []
    for stage in probe_rank_stages(model, layout):
        payloads = [b.param_bytes for b in stage.buffers]
        labels = buffer_labels(stage)
        params = (
            emulated_host(strategy, payloads, cycles, labels)
            if emulated
            else rank_host(strategy, stage, cycles)
        )
        state = optimizer_host(optimizer_strategy, stage, opt, emulated=emulated)[0]
        run = project_rank_run(
            strategy, optimizer_strategy, stage, opt, cycles=cycles, emulated=emulated
        )
        names = tuple(f"{k} {b.param_bytes}" for k, b in zip(labels, stage.buffers, strict=True))
        per_stage.append((stage, names, params, state, run))
    ranks = []
    for rank in range(layout.world_size):
        stage, names, params, state, run = per_stage[layout.pp_rank(rank)]
        ranks.append(
            RankProjection(
                rank=rank,
                pp_rank=stage.pp_rank,
                payload_bytes=stage.param_bytes,
                buffers=names,
                params=params,
                optimizer_host_bytes=state,
                run=run,
            )
        )
    per_node = layout.ranks_per_node or layout.world_size
    nodes = []
    for node in range(layout.world_size // per_node):
        members = ranks[node * per_node : (node + 1) * per_node]
        nodes.append(
            NodeProjection(
                node_rank=node,
                ranks=tuple(r.rank for r in members),
                params_peak_bytes=sum(r.params.peak for r in members),
                optimizer_host_bytes=sum(r.optimizer_host_bytes for r in members),
                host_peak_bytes=sum(r.host_peak_bytes for r in members),
                added_peaks_bytes=sum(r.added_peaks_bytes for r in members),
            )
        )
    return WorldProjection(
        layout=layout,
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        emulated=emulated,
        ranks=tuple(ranks),
        nodes=tuple(nodes),
    )
