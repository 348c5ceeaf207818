"""Scale a scenario down to one probe process: the payload and the limit by one factor.

``scale = probe payload / per-rank payload of the reported model``, where the probe
payload is the ``param_data`` bytes of the probe model sized for ``[repro] payload``
(exact, from ``plan.probe``) and the per-rank payload is that of the largest rank on the
worst node (host) or the worst device (GPU).

Host: the node limit, less what the node holds besides the ranks' parameter copies
(``host_reserved_per_node``, and the optimizer state when it is offloaded, at its exact
size), split evenly over the node's ranks, times ``scale``: the bytes one probe process
may add over its own pre-offload baseline.

GPU: the free device memory while the next phase runs (``gpu_memory_per_device -
gpu_reserved_per_device``) times ``scale`` is the headroom the probe may leave behind
after its offload. The probe process's device limit and rollout claim are then chosen
so that ``limit - claim - residue`` equals that headroom, where ``residue`` is what a
calibration run leaves on the device after offloading everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from offloadprobe.core.config import ModelConfig
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term
from offloadprobe.plan.probe import probe_payload
from offloadprobe.plan.projection import PAIRED_OPTIMIZER_STRATEGY, optimizer_host
from offloadprobe.scenarios.schema import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class Scale:
    """The scale factor and where it comes from."""

    probe_payload: int
    rank_payload: int

    @property
    def factor(self) -> float:
        return self.probe_payload / self.rank_payload

    def apply(self, nbytes: int) -> int:
        """``nbytes`` scaled down, rounded down to a byte."""
        return nbytes * self.probe_payload // self.rank_payload

    def describe(self) -> str:
        return (
            f"scale = probe payload / rank payload = {self.probe_payload:,} B / "
            f"{self.rank_payload:,} B = {self.factor:.6g}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class HostScaling:
    """The per-process host budget the scaled run must stay within."""

    scale: Scale
    rank_budget: int
    """Bytes one full-scale rank may spend on parameter copies."""
    limit: int
    """``rank_budget`` scaled: bytes one probe process may add over its baseline."""
    terms: tuple[Term, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuScaling:
    """The scaled device headroom during the rollout phase."""

    scale: Scale
    limit: int
    """``gpu_memory_per_device`` scaled."""
    claim: int
    """``gpu_reserved_per_device`` scaled."""
    headroom: int
    """``limit - claim``: what the probe may leave on the device after offload."""
    terms: tuple[Term, ...]


def host_scaling(s: Scenario, probe: ModelConfig) -> HostScaling:
    """Scale ``s``'s host limit to one probe process of ``probe``'s shape."""
    limit = s.limit.host_memory_per_node
    if limit is None:
        raise UsageError(f"{s.path}: limit.host_memory_per_node: needed to reproduce a host OOM")
    layout = s.layout()
    payloads = layout.per_node([st.param_bytes for st in layout.stages])
    node = max(range(len(payloads)), key=payloads.__getitem__)
    stages = dict(layout.node_stages[node])
    ranks = sum(stages.values())
    optimizer = 0
    if s.offload.optimizer:
        opt = s.offload.optimizer_options
        optimizer = sum(
            optimizer_host(PAIRED_OPTIMIZER_STRATEGY, layout.stages[pp], opt)[0] * n
            for pp, n in stages.items()
        )
    budget = limit - s.limit.host_reserved_per_node - optimizer
    if budget <= 0:
        raise UsageError(
            f"{s.path}: limit.host_memory_per_node: {format_bytes(limit)} leaves nothing for "
            f"parameter copies after {format_bytes(limit - budget)} of other usage on the node"
        )
    rank_payload = max(layout.stages[pp].param_bytes for pp in stages)
    scale = Scale(probe_payload=probe_payload(probe), rank_payload=rank_payload)
    rank_budget = budget // ranks
    scaled = scale.apply(rank_budget)
    terms = (
        Term(label="host limit per node", formula="limit.host_memory_per_node", value=limit),
        Term(
            label="reserved on the node",
            formula="limit.host_reserved_per_node",
            value=s.limit.host_reserved_per_node,
        ),
        Term(
            label="optimizer state on the node's host",
            formula=f"{ranks} ranks x exact shard bytes (offload.optimizer = "
            f"{str(s.offload.optimizer).lower()})",
            value=optimizer,
        ),
        Term(
            label="node budget for parameter copies",
            formula="limit - reserved - optimizer",
            value=budget,
        ),
        Term(
            label="per-rank budget",
            formula=f"node budget / {ranks} ranks (node {node})",
            value=rank_budget,
        ),
        Term(
            label="rank payload",
            formula="param_data bytes of the node's largest rank",
            value=rank_payload,
        ),
        Term(
            label="probe payload",
            formula="param_data bytes of the scaled probe model",
            value=scale.probe_payload,
        ),
        Term(
            label="scaled host limit per process",
            formula=f"per-rank budget x {scale.probe_payload} / {rank_payload}",
            value=scaled,
        ),
    )
    return HostScaling(scale=scale, rank_budget=rank_budget, limit=scaled, terms=terms)


def gpu_scaling(s: Scenario, probe: ModelConfig) -> GpuScaling:
    """Scale ``s``'s device limit and rollout claim to one probe process."""
    limit = s.limit.gpu_memory_per_device
    if limit is None:
        raise UsageError(f"{s.path}: limit.gpu_memory_per_device: needed to reproduce a GPU OOM")
    claim = s.limit.gpu_reserved_per_device
    rank_payload = max(st.param_bytes for st in s.layout().stages)
    scale = Scale(probe_payload=probe_payload(probe), rank_payload=rank_payload)
    scaled_limit, scaled_claim = scale.apply(limit), scale.apply(claim)
    headroom = scaled_limit - scaled_claim
    terms = (
        Term(label="GPU limit per device", formula="limit.gpu_memory_per_device", value=limit),
        Term(label="next phase claims", formula="limit.gpu_reserved_per_device", value=claim),
        Term(label="headroom", formula="limit - claim", value=limit - claim),
        Term(
            label="rank payload", formula="param_data bytes of the largest rank", value=rank_payload
        ),
        Term(
            label="probe payload",
            formula="param_data bytes of the scaled probe model",
            value=scale.probe_payload,
        ),
        Term(label="scaled GPU limit", formula="limit x scale", value=scaled_limit),
        Term(label="scaled claim", formula="claim x scale", value=scaled_claim),
        Term(label="scaled headroom", formula="scaled limit - scaled claim", value=headroom),
    )
    return GpuScaling(
        scale=scale, limit=scaled_limit, claim=scaled_claim, headroom=headroom, terms=terms
    )
