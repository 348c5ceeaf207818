"""Project offloadprobe's own probe model, to check projections against measurements.

The probe (``offloadprobe.engine.model.builder``) is megatron's ``GPTModel`` with the local
layer spec and its defaults (LayerNorm with biases, learned absolute positions, untied
output layer, a 4h MLP without gating), on one rank (tp = pp = ep = dp = 1), wrapped in
``DistributedDataParallel`` with fp32 grad reduction, no overlap and the distributed
optimizer. :func:`probe_stage` lays that out with ``plan.layout``;
:func:`project_probe` predicts what ``offloadprobe run`` reports as
``summary.host_peak_bytes``: the highest host figure of any offload or load phase over
the host RSS just before the first offload.

On CUDA the strategies' host allocations are replayed through the pinned-allocator
model (:func:`offloadprobe.plan.projection.rank_host`). In CPU emulation there is no
pinned memory and the device buffers themselves sit in host memory, so a separate model
applies (:func:`emulated_host`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.records import SCHEMA_VERSION
from offloadprobe.layout.inputs import DdpOptions, GptShape, Parallelism
from offloadprobe.layout.pinned import Alloc, page_rounded, replay
from offloadprobe.layout.stages import StageLayout, lay_out_model
from offloadprobe.layout.terms import Term
from offloadprobe.plan.measured import MEASURED, PROJECTED, MeasuredRow
from offloadprobe.plan.projection import RankHost, buffer_labels, param_events, rank_host

PROBE_PARALLELISM = Parallelism(gpus_per_node=1)
PROBE_DDP = DdpOptions(grad_reduce_in_fp32=True, overlap_grad_reduce=False)


def probe_shape(model: ModelConfig) -> GptShape:
    """The probe's ``GPTModel`` as a ``GptShape`` (megatron's local-spec defaults); with
    experts, every layer is an MoE layer of experts as wide as the dense MLP (4h)."""
    return GptShape(
        num_experts=model.num_experts,
        moe_ffn_hidden_size=4 * model.hidden_size if model.num_experts else None,
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        vocab_size=model.vocab_size,
        ffn_hidden_size=4 * model.hidden_size,
        swiglu=False,
        normalization="LayerNorm",
        add_bias_linear=True,
        position_embedding="learned_absolute",
        max_sequence_length=model.seq_length,
        untie_embeddings_and_output_weights=True,
    )


def probe_stage(model: ModelConfig) -> StageLayout:
    """The probe's DDP buffers (one rank, one stage)."""
    return lay_out_model(probe_shape(model), PROBE_PARALLELISM, PROBE_DDP).stages[0]


def probe_payload(model: ModelConfig) -> int:
    """Bytes of ``param_data`` the probe's strategies move (``summary``'s payload)."""
    return probe_stage(model).param_bytes


def emulated_host(
    strategy: str,
    payloads: Sequence[int],
    cycles: int,
    labels: Sequence[str] | None = None,
) -> RankHost:
    """Host figures of ``strategy`` in CPU emulation.

    The emulated device memory is not host memory the strategy allocated, so only the
    strategy's own host allocations count, as on CUDA; but nothing is page-locked: a
    pinned or registered request is an ordinary host allocation of exact (page-rounded)
    size, with no power-of-two rounding and no pinned cache.
    """
    names = list(labels) if labels is not None else [f"buffer {b}" for b in range(len(payloads))]
    events = [
        dataclasses.replace(e, kind="pageable") if isinstance(e, Alloc) else e
        for e in param_events(strategy, payloads, cycles, names)
    ]
    replayed = replay(events)
    terms = [
        *(
            Term(label=f"{name} param_data", formula="bytes, page-rounded", value=page_rounded(n))
            for name, n in zip(names, payloads, strict=True)
        ),
        Term(
            label="host peak (CPU emulation)",
            formula="its host allocations replayed, pinned requests as ordinary memory",
            value=replayed.peak,
        ),
        Term(label="steady host (CPU emulation)", formula="held copies", value=replayed.final),
    ]
    return RankHost(
        strategy=strategy,
        pp_rank=0,
        peak=replayed.peak,
        steady=replayed.final,
        pinned=0,
        terms=tuple(terms),
    )


def probe_projection(
    model: ModelConfig, strategy: str, *, emulated: bool, cycles: int = 3
) -> RankHost:
    """Every projected host figure of ``strategy`` on the probe model, with its terms."""
    stage = probe_stage(model)
    if not emulated:
        return rank_host(strategy, stage, cycles)
    return emulated_host(
        strategy, [b.param_bytes for b in stage.buffers], cycles, buffer_labels(stage)
    )


def project_probe(
    model: ModelConfig, strategy: str, *, emulated: bool = False, cycles: int = 3
) -> int:
    """Predicted ``summary.host_peak_bytes`` of ``offloadprobe run`` for ``strategy``."""
    return probe_projection(model, strategy, emulated=emulated, cycles=cycles).peak


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbePlan:
    """``plan --probe``: every model strategy projected on the probe model, and each
    ``--strategy`` measured in one run of it there."""

    model: ModelConfig
    device: str
    cycles: int
    payload_bytes: int
    strategies: tuple[RankHost, ...]
    measured: tuple[MeasuredRow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        doc = {"schema_version": SCHEMA_VERSION, "kind": "probe plan", **asdict(self)}
        doc["strategies"] = [{**row, "figures": PROJECTED} for row in doc["strategies"]]
        doc["measured"] = [{**row, "figures": MEASURED} for row in doc["measured"]]
        return doc
