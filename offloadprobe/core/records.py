"""Typed records of what a run measured. Reporters render these and nothing else. The
per-phase readings are ``core.readings``' and a world's rank and node rows
``core.world_records``' (imported here, where every caller finds them).

Every size is an ``int`` of bytes; ``None`` means "not measurable here" (for
example GPU readings in CPU emulation), never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from offloadprobe.core.engines import DEFAULT_ENGINE
from offloadprobe.core.limits import HostLimitRecord, limit_from_dict
from offloadprobe.core.outcomes import Failure, Verdict, where_text
from offloadprobe.core.readings import CgroupReading, GpuReading, HostReading, PinnedReading
from offloadprobe.core.world_records import NodePhase, NodeRecord, RankPlace, Spread

SCHEMA_VERSION = 6
"""The version of every verb's ``--json`` document (run, compare, plan, repro, attach,
alloc-conf, the pytest plugin's saved records); their JSON Schemas are
``offloadprobe/schemas/*.schema.json``. 2 added: per-run ``label``, ``verdict``/
``outcome``, ``summary.params``, ``summary.optimizer``, ``summary.moved_bytes``,
``failure_kind``/``failure_cycle``/``failure_phase``, ``not_offloaded``. 3 added: per-run
``place`` and ``world`` (runs over several ranks: every rank's record and the node rows).
4 added: top-level ``kind`` and ``budgets``; per run ``failure_record``, ``residency``
(the facts behind "not offloaded") and ``exit_code``. 5: every verb's document carries
``schema_version`` (plan, repro and alloc-conf added it; attach's ``schema: 1`` became
it), and per run ``host_limit`` (``run --host-limit``, ``repro``'s limited children: the
limit, the page cache dropped before it, the reclaim under it). 6: attach's document
takes every verb's conventions: ``budgets`` (as given), ``outcome`` (the verdict record),
``interrupted``, and its ``breaches`` are ``core.budgets.Breach`` (``strategy``,
``budget``, ``message``, ``kind``; they were ``budget``, ``value``, ``limit``,
``where``, which ``show`` still reads), and ``exit_code`` is every verb's (the job's own
status stays ``job_exit_code``); per run and in ``settings``, ``engine`` (the training
engine, ``core.engines``; a row of another engine than the default carries it in its
``label``); per residency fact ``param_copies`` (the parameters' bytes found on the device
by content, by where they hang). Keys are only ever added, but for attach's breaches."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResidencyFact:
    """What one cycle's offload left on the device and gave back, as measured: the facts
    the "not offloaded" and "partly offloaded" rules (``core.verdicts``) judge."""

    cycle: int
    param_bytes_to_move: int
    """``param_data`` bytes the parameter strategy should move (0 for ``none``)."""
    param_bytes_left: int
    """``param_data`` bytes still on the device after the offload (the audit)."""
    param_offload_gave_bytes: int
    """The parameter offload phase's measured net device drop (grads left out)."""
    built_on_device_bytes: int
    """Device bytes the strategies hold from their construction."""
    moves_optimizer: bool
    """Whether the optimizer strategy moves state (its own phases)."""
    optimizer_state_bytes: int
    """Optimizer state on the device before the offload."""
    optimizer_moved_bytes: int
    """Optimizer state that left the device (state before less state left)."""
    left_by_owner: dict[str, int] = field(default_factory=dict)
    """Device bytes still there after every offload of the cycle, by owner (the audit)."""
    unreferenced: dict[str, int] = field(default_factory=dict)
    """Live device tensors no part of the model or optimizer reaches, by when they were
    made (``made during train``...): a strategy's own copy, a module-level cache."""
    unattributed_bytes: int = 0
    """Device bytes over the zero that nothing names, beyond the framework's residue
    (another allocator's: CuPy, a graph pool; the driver's count beyond PyTorch's)."""
    outside_allocator_bytes: int = 0
    """Device bytes outside PyTorch's allocator, over those at the first offload's start."""
    residue_bytes: int = 0
    """The framework's residue, expected to stay (no Python tensor holds it: cuBLAS
    workspaces, allocator internals), measured at the first offload's start."""
    left_total_bytes: int | None = None
    """Every device byte the process holds over the zero (before the model existed)."""
    allowance_bytes: int = 0
    """Device bytes a strategy may keep beside what stays by design (a staging buffer)."""
    parts_to_move: dict[str, int] = field(default_factory=dict)
    """Bytes of the model's parts outside the DDP buffers the parameter strategy should
    move (``frozen``, ``ref_model``; what each left is in ``left_by_owner``)."""
    param_copies: dict[str, int] = field(default_factory=dict)
    """Bytes of ``param_data``'s content still on the device after the offload outside its
    own storage and the parts', by where they hang (``grad_data``, an optimizer key, a
    ``Type.attribute``, ``device memory no part owns``): found by content, so a copy is
    the parameters' wherever it hangs (``engine/model/param_copies.py``)."""
    roles: dict[str, str] = field(default_factory=dict)
    """Each owner's role, by the engine's inventory (``core.roles``: ``parameters``,
    ``gradients``, ``optimizer state``, ``frozen``, ``reference model``): what the rules
    judge it by. Empty in records written before owners carried roles (megatron-core's:
    ``core.owner_roles``)."""
    engine_readings: dict[str, int] = field(default_factory=dict)
    """What the engine read after the offload, by name (FSDP2: ``shards``,
    ``shards_pinned``, ``shards_on_host``, ``shards_on_device``, ``shards_uneven``,
    ``grads_on_host``, ``grads_pinned``, ``host_bytes``, ``pinned_requested_bytes``,
    ``pinned_owned_bytes``): facts, rendered
    as they are; empty for an engine that reads none (megatron-core)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseRecord:
    """One phase (train, offload or load) of one cycle."""

    cycle: int
    phase: str
    seconds: float
    bytes_moved: int
    gbps: float | None
    host: HostReading
    pinned: PinnedReading | None
    gpu: GpuReading | None
    cgroup: CgroupReading | None
    loss: float | None = None
    left_on_device: dict[str, int] | None = None
    """Offload phases: bytes still on the device afterwards, per owner (state key or buffer)."""
    device_freed_bytes: int | None = None
    """Device bytes freed during the phase, measured (CUDA allocator, or the emulated
    device's accounting); None where not measurable."""
    device_allocated_bytes: int | None = None
    """Device bytes allocated or restored during the phase, measured."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartSummary:
    """One part of an offload (parameters or optimizer state) over its own bytes."""

    moved_bytes: int
    """Bytes this part's offload must move: the denominator of its ``_x`` figures."""
    host_peak_bytes: int
    host_peak_x: float
    steady_host_bytes: int
    steady_host_x: float
    offload_gbps: float | None
    load_gbps: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """One strategy's figures of merit (see README for each definition)."""

    host_peak_bytes: int
    host_peak_x: float
    steady_host_bytes: int
    steady_host_x: float
    pinned_reserved_bytes: int | None
    """Pinned host bytes after the last offload: the larger of CUPTI's records (any
    allocator, where it records: ``pinned_source``) and PyTorch's host allocator's
    reserved bytes plus the strategies' declared ``cudaHostRegister`` bytes."""
    gpu_left_after_offload_bytes: int | None
    offload_gbps: float | None
    load_gbps: float | None
    first_offload_gbps: float | None
    first_load_gbps: float | None
    integrity_ok: bool
    left_after_offload_bytes_by_key: dict[str, int] | None = None
    """Device bytes per owner still resident after the last offload (residency audit)."""
    held_while_training_bytes: int | None = None
    """Host bytes the strategy keeps through the train phases: the most held after any
    load, over the pre-offload baseline (None where no load completed)."""
    held_while_training_x: float | None = None
    """The same over the bytes the offload moves."""
    held_by_cycle_bytes: list[int] = field(default_factory=list)
    """Host bytes held after each cycle's last load, over the same baseline, cycle by
    cycle: a residue that grows (glibc keeping freed pageable copies) shows here."""
    pinned_source: str | None = None
    """``cupti`` (CUPTI recorded, any allocator) or ``allocator`` (PyTorch's + declared)."""
    pinned_declared_bytes: int | None = None
    """What the strategies declared they page-locked themselves (a cross-check on CUDA)."""
    pinned_recorded_bytes: int | None = None
    """Page-locked bytes CUPTI recorded after the last offload (any allocator)."""
    optimizer_state_bytes: int | None = None
    """Bytes the optimizer holds on the device before offload (the optimizer payload)."""
    steady_host_x_optimizer_state: float | None = None
    """Steady host footprint over the optimizer-state bytes."""
    params: PartSummary | None = None
    """The parameter move alone, over the bytes it moves (None when nothing moved)."""
    optimizer: PartSummary | None = None
    """The optimizer-state move alone, over the bytes it moves (None when nothing moved)."""
    moved_bytes: int | None = None
    """Bytes the whole offload moves: the denominator of ``host_peak_x``/``steady_host_x``."""


def row_label(
    strategy: str,
    optimizer_strategy: str | None,
    engine: str | None = None,
    name: str | None = None,
) -> str:
    """A row's name everywhere (tables, budgets, baselines, regression keys): the user's
    own, or both strategies, ``lazy + legacy``, with the engine where it is not the
    default, ``lazy + none [fsdp2]``: rows of two engines never match by name."""
    if name:
        return name
    label = f"{strategy} + {optimizer_strategy or 'none'}"
    return label if engine in (None, DEFAULT_ENGINE) else f"{label} [{engine}]"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """Everything one strategy's run measured: facts only, judged by ``core.verdicts``."""

    strategy: str
    description: str
    payload_bytes: int
    grad_bytes: int
    baseline_host_bytes: int
    """The zero of every host figure, in the first offload's terms: the host just before
    the first offload, less what the strategies held from their construction on and less
    ``pre_offload_counted_bytes`` (``core.host_zero``)."""
    gpu_baseline_bytes: int | None
    """GPU bytes allocated before the model existed."""
    phases: list[PhaseRecord]
    summary: RunSummary | None
    """None when the run stopped before its first offload/load pair completed."""
    integrity: list[str] = field(default_factory=list)
    """One line per failed round-trip check; empty when every byte came back."""
    notes: list[str] = field(default_factory=list)
    failure: Failure | None = None
    """Why and where the run stopped early (out of memory, a crash, a killed process)."""
    optimizer_strategy: str = "none"
    engine: str = DEFAULT_ENGINE
    """The training engine the run's state lived in (``core.engines``)."""
    optimizer: str = ""
    """The optimizer that computed the steps, in words."""
    left_after_offload: list[dict[str, Any]] = field(default_factory=list)
    """The last offload's residency audit: owner, parameter name, dtype, bytes per tensor."""
    residency: list[ResidencyFact] = field(default_factory=list)
    """Per offload cycle: what was to move, what moved, what stayed (for the verdict)."""
    place: RankPlace | None = None
    """Runs over several ranks: which rank this record is (None for one process)."""
    world: WorldRun | None = None
    """Runs over several ranks, on the row's record (rank 0's, with every rank's failures
    merged into it): every rank's record and the node rows."""
    label_override: str | None = None
    """A row name the user gave (``--strategy name=spec``); the pair otherwise."""
    construction: PhaseRecord | None = None
    """The strategies' construction, measured like a phase: what they hold from then on
    is in every host figure (``baseline_host_bytes`` is the host before they were built,
    in the first offload's terms)."""
    part_bytes: dict[str, int] = field(default_factory=dict)
    """Bytes of each model part outside the DDP buffers (``frozen``: the policy's frozen
    parameters, ``ref_model``: the reference model), beside ``payload_bytes``."""
    sequence: list[str] = field(default_factory=list)
    """The steps of a ``--sequence`` run, in order (a phase's ``cycle`` is then its step's
    number, from 1); empty for fixed cycles."""
    host_limit: HostLimitRecord | None = None
    """The host limit the worker ran under, as its parent measured it (None: no limit)."""
    pre_offload_growth_bytes: int | None = None
    """Host growth over the train phases before the first offload, measured as any phase
    (strategy code can run in them: a hook); None where the run never offloaded."""
    framework_growth_bytes: int | None = None
    """The same train phases' host growth on the model trained without strategies in the
    same process (the no-offload reference, or a run of its own without it), measured;
    None where none ran (no train step before the first offload)."""
    pre_offload_counted_bytes: int = 0
    """The part of ``pre_offload_growth_bytes`` beyond the framework's and beyond noise:
    counted in every host figure (``core.host_zero``)."""

    @property
    def label(self) -> str:
        """Both strategies, ``lazy + legacy``, or the user's own name for the row."""
        return row_label(self.strategy, self.optimizer_strategy, self.engine, self.label_override)

    def cycles(self) -> list[dict[str, Any]]:
        """Phases grouped per cycle, the JSON's ``cycles`` list."""
        grouped: dict[int, list[dict[str, Any]]] = {}
        for rec in self.phases:
            grouped.setdefault(rec.cycle, []).append(asdict(rec))
        return [{"cycle": c, "phases": p} for c, p in sorted(grouped.items())]


@dataclass(frozen=True, kw_only=True, slots=True)
class WorldRun:
    """A run over several ranks: its layout, every rank's record, and one row per node."""

    world_size: int
    nnodes: int
    layout: dict[str, int | None]
    """tp, pp, ep, cp, vpp and the derived dp."""
    ranks: list[RunRecord]
    nodes: list[NodeRecord]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """A whole invocation: the environment and one run per strategy."""

    device: str
    emulated: bool
    emulation_note: str | None
    payload_bytes: int
    versions: dict[str, str | None]
    machine: dict[str, Any]
    model: dict[str, Any]
    settings: dict[str, Any]
    runs: list[RunRecord]
    schema_version: int = SCHEMA_VERSION
    verdicts: list[Verdict] = field(default_factory=list)
    """One per run, in run order, when the invocation judged them (budgets included)."""
    budgets: list[str] = field(default_factory=list)
    """The budgets every row was held to, as the user gave them (``host peak <= 1.1x``)."""

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document (keys only ever get added)."""
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "kind": "run",
            "device": self.device,
            "emulated": self.emulated,
            "emulation_note": self.emulation_note,
            "payload_bytes": self.payload_bytes,
            "versions": self.versions,
            "machine": self.machine,
            "model": self.model,
            "settings": self.settings,
            "budgets": list(self.budgets),
            "runs": [run_to_dict(run) for run in self.runs],
        }
        for entry, verdict in zip(doc["runs"], self.verdicts, strict=False):
            judged(entry, verdict)
        return doc


def judged(entry: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """A run's JSON entry with its verdict, outcome, exit code and "not offloaded" lines."""
    entry["verdict"] = verdict.line()
    entry["outcome"] = asdict(verdict)
    entry["exit_code"] = verdict.exit_code
    residency = ("not offloaded", "partly offloaded")
    entry["not_offloaded"] = list(verdict.reasons) if verdict.kind in residency else []
    return entry


def build_record(cls: type, data: Any) -> Any:
    """Rebuild a (nested) record dataclass from its ``asdict`` form."""
    import dataclasses
    import typing

    if data is None or not dataclasses.is_dataclass(cls):
        return data
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, hint = data[f.name], hints[f.name]
        target = next(
            (
                a
                for a in typing.get_args(hint)
                if isinstance(a, type) and dataclasses.is_dataclass(a)
            ),
            hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None,
        )
        if target is not None and value is not None:
            value = build_record(target, value)
        kwargs[f.name] = value
    return cls(**kwargs)


def run_to_dict(run: RunRecord) -> dict[str, Any]:
    """One run's JSON form: phases grouped per cycle, the label, nested ranks alike. The
    failure is written twice: as the record, and as the flat keys of schema 2."""
    entry = asdict(run)
    entry.pop("phases")
    entry.pop("label_override")
    entry["cycles"] = run.cycles()
    entry["label"] = run.label
    failure = run.failure
    entry["failure_record"] = entry.pop("failure")
    entry["failure"] = failure.text if failure else None
    entry["failure_kind"] = failure.kind if failure else None
    entry["failure_cycle"] = failure.cycle if failure else None
    entry["failure_phase"] = failure.phase if failure else None
    if run.world is not None:
        entry["world"]["ranks"] = [run_to_dict(r) for r in run.world.ranks]
    return entry


def failure_from_dict(entry: dict[str, Any]) -> Failure | None:
    """The run's failure from its record, or from the flat keys of schema 2 and 3."""
    record = entry.get("failure_record")
    if record:
        return Failure(**record)
    if not entry.get("failure"):
        return None
    cycle, phase = entry.get("failure_cycle"), entry.get("failure_phase")
    message = str(entry["failure"]).removesuffix(f" ({where_text(cycle, phase)})")
    return Failure(
        kind=entry.get("failure_kind") or "crashed", message=message, cycle=cycle, phase=phase
    )


def world_from_dict(data: dict[str, Any] | None) -> WorldRun | None:
    """Rebuild a ``WorldRun`` from its JSON form."""
    if data is None:
        return None
    nodes = []
    for node in data["nodes"]:
        fields = dict(node)
        fields["figures"] = {k: Spread(**v) for k, v in node["figures"].items()}
        fields["phases"] = [NodePhase(**p) for p in node["phases"]]
        nodes.append(NodeRecord(**fields))
    return WorldRun(
        world_size=data["world_size"],
        nnodes=data["nnodes"],
        layout=data["layout"],
        ranks=[run_from_dict(r) for r in data["ranks"]],
        nodes=nodes,
        notes=list(data.get("notes", [])),
    )


def run_from_dict(entry: dict[str, Any]) -> RunRecord:
    """Rebuild a ``RunRecord`` from one entry of a report's ``runs`` list."""
    phases = [build_record(PhaseRecord, p) for c in entry["cycles"] for p in c["phases"]]
    fields = {k: v for k, v in entry.items() if k not in ("cycles", "phases")}
    fields["phases"] = phases
    fields["summary"] = build_record(RunSummary, entry.get("summary"))
    fields["place"] = RankPlace(**entry["place"]) if entry.get("place") else None
    fields["world"] = world_from_dict(entry.get("world"))
    fields["failure"] = failure_from_dict(entry)
    fields["residency"] = [ResidencyFact(**r) for r in entry.get("residency") or []]
    fields["construction"] = build_record(PhaseRecord, entry.get("construction"))
    fields["host_limit"] = limit_from_dict(entry.get("host_limit"))
    pair = row_label(
        entry.get("strategy", ""), entry.get("optimizer_strategy"), entry.get("engine")
    )
    label = entry.get("label")
    fields["label_override"] = label if label and label != pair else None
    known = {f for f in RunRecord.__dataclass_fields__}
    return RunRecord(**{k: v for k, v in fields.items() if k in known})


def verdict_from_dict(data: dict[str, Any]) -> Verdict:
    fields = dict(data)
    fields["reasons"] = tuple(fields.get("reasons") or ())
    known = {f for f in Verdict.__dataclass_fields__}
    return Verdict(**{k: v for k, v in fields.items() if k in known})


def report_from_dict(doc: dict[str, Any]) -> Report:
    """Rebuild a ``Report`` from its JSON document (unknown keys are ignored)."""
    known = {f for f in Report.__dataclass_fields__} - {"runs", "verdicts"}
    verdicts = [verdict_from_dict(r["outcome"]) for r in doc["runs"] if r.get("outcome")]
    return Report(
        runs=[run_from_dict(r) for r in doc["runs"]],
        verdicts=verdicts if len(verdicts) == len(doc["runs"]) else [],
        **{k: v for k, v in doc.items() if k in known},
    )
