"""The one option model: every configurable field, declared once.

Each ``Option`` names its flag, its help, its unit and where its value goes. The command
lines of ``run`` and ``compare``, the pytest plugin's marker keywords and the scenario's
``[repro]`` keys are all derived from ``OPTIONS`` (``cli/params.py`` builds the flags;
``pytest_plugin`` and ``scenarios.schema`` read the keywords), and ``build_config`` turns
any of them into a ``RunConfig``. A parity test fails when a ``RunConfig`` field has no
option or an option is missing from a verb that should have it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from offloadprobe.core.config import (
    ModelConfig,
    OptimizerChoice,
    ParallelConfig,
    RunConfig,
    size_for_payload,
)
from offloadprobe.core.engines import DEFAULT_ENGINE, engine, engine_help
from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import parse_size

RUN, COMPARE, PLUGIN, SCENARIO, PLAN = "run", "compare", "plugin", "scenario", "plan"
EVERYWHERE = frozenset({RUN, COMPARE, PLUGIN})
WITH_PLAN = EVERYWHERE | {PLAN}
DEFAULT_MODEL = ModelConfig()


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One configurable field: its flag, its help, its unit, its place in ``RunConfig``."""

    name: str
    """The Python name: the plugin keyword, the scenario key, the function parameter."""
    help: str
    default: Any = None
    type: type = str
    flag: str = ""
    """``--layers``; derived from the name when empty."""
    off_flag: str | None = None
    """A boolean's other spelling (``--classic`` for ``--precision-aware``); ``--no-...``
    when None."""
    unit: str | None = None
    """``size``: a size with its unit (``512MiB``); ``budget``: see ``core.budgets``;
    ``sequence``: steps or a preset (``core.sequences``)."""
    target: str | None = None
    """Where the value goes: ``model.num_layers``, ``optimizer.precision_aware``,
    ``parallel.tp`` or a ``RunConfig`` field; None for what a verb uses itself."""
    verbs: frozenset[str] = EVERYWHERE
    repeatable: bool = False
    group: str = "run"
    """Where ``--help`` lists it."""

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def negative_flag(self) -> str:
        return self.off_flag or "--no-" + self.cli_flag.removeprefix("--")


def _o(name: str, help: str, default: Any = None, kind: type = str, **kw: Any) -> Option:
    return Option(name=name, help=help, default=default, type=kind, **kw)


_M = DEFAULT_MODEL
_FS = WITH_PLAN | {SCENARIO}
SHARDS_HELP = (
    "FSDP2: reproduce this many shards in one process, as rank --shard-rank of them "
    "(PyTorch's fake process group: real sharding and padding, no real collectives)."
)
RANK_HELP = "FSDP2: which rank of --shards this process plays (the last carry the padding)."
PRESET_HELP = (
    "FSDP2: the block shapes of a real model: qwen2.5-7b, qwen3-8b, llama3.1-8b or plain "
    "(default plain; --payload then sets the number of blocks)."
)


def _m(name: str, help: str, default: Any, kind: type, field: str) -> Option:
    """A model option: ``model.<field>``, listed with the model's, on every verb and plan."""
    return _o(name, help, default, kind, target=f"model.{field}", group="model", verbs=WITH_PLAN)


OPTIONS: tuple[Option, ...] = (
    # the model
    _o(
        "payload",
        "Size the model to about this many bytes of bf16 parameters, e.g. 512MiB "
        "or 5GiB (overrides --hidden and --vocab).",
        unit="size",
        group="model",
        verbs=WITH_PLAN | {SCENARIO},
    ),
    _m(
        "layers",
        "Transformer layers (FSDP2: blocks of the preset).",
        _M.num_layers,
        int,
        "num_layers",
    ),
    _o("preset", PRESET_HELP, None, target="model.preset", group="model", verbs=_FS),
    _m("hidden", "Hidden size.", _M.hidden_size, int, "hidden_size"),
    _m(
        "heads",
        "Attention heads (must divide --hidden).",
        _M.num_attention_heads,
        int,
        "num_attention_heads",
    ),
    _m("vocab", "Vocabulary size.", _M.vocab_size, int, "vocab_size"),
    _m("seq_length", "Tokens per sample.", _M.seq_length, int, "seq_length"),
    _o(
        "micro_batch",
        "Samples per train step.",
        _M.micro_batch_size,
        int,
        target="model.micro_batch_size",
        group="model",
    ),
    _o(
        "num_experts",
        "Routed experts per layer (MoE); 0 for dense.",
        0,
        int,
        target="model.num_experts",
        group="model",
    ),
    _o(
        "moe_router_topk",
        "Experts per token (MoE).",
        _M.moe_router_topk,
        int,
        target="model.moe_router_topk",
        group="model",
    ),
    _o(
        "ref_model",
        "Add a frozen reference model of the policy's shape, not DDP-wrapped, passed to "
        "the strategies after the DDP chunks (the KL term's reference policy).",
        False,
        bool,
        target="model.ref_model",
        group="model",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "frozen_fraction",
        "Freeze about this fraction of the policy's parameters outside the DDP buffers, "
        "as LoRA's base weights are (e.g. 0.5).",
        0.0,
        float,
        target="model.frozen_fraction",
        group="model",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "workspace_cache",
        "Fill a module-level cache of this many device bytes in the forward pass, "
        "referenced by no parameter (as TransformerEngine's FP8 weight workspaces), e.g. 64MiB.",
        unit="size",
        target="model.workspace_cache_bytes",
        group="model",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    # the run
    _o("cycles", "Offload/load cycles.", 3, int, target="cycles", verbs=WITH_PLAN | {SCENARIO}),
    _o(
        "sequence",
        "Steps to run instead of --cycles fixed cycles: a list such as "
        "train,offload,offload,load,train or a preset: double-offload, load-without-offload, "
        "offload-optimizer-only, checkpoint-between, validate-without-refit.",
        unit="sequence",
        target="sequence",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "train_steps",
        "Train steps before the first offload and between.",
        1,
        int,
        target="train_steps",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "device",
        "cuda, cpu or auto (CUDA where present).",
        "auto",
        target="device",
        verbs=WITH_PLAN,
    ),
    _o(
        "seed",
        "Seed for weights and data.",
        1234,
        int,
        target="seed",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "rollout_claim",
        "Between offload and load, claim this much device memory, as a "
        "rollout engine would (e.g. 60GiB).",
        unit="size",
        target="rollout_claim_bytes",
    ),
    _o(
        "gpu_limit",
        "Cap the device memory the run may allocate (a scaled-down GPU).",
        unit="size",
        target="gpu_limit_bytes",
    ),
    _o(
        "engine",
        engine_help(),
        DEFAULT_ENGINE,
        target="engine",
        verbs=WITH_PLAN | {SCENARIO},
    ),
    _o(
        "emulation_malloc",
        "CPU emulation's glibc malloc: real (glibc's own dynamic mmap threshold, as on a GPU "
        "host) or fixed (a 128 KiB threshold: each host copy a mapping, given back at its free).",
        "real",
        target="emulation_malloc",
        verbs=EVERYWHERE | {SCENARIO},
    ),
    _o(
        "reference_check",
        "Compare each train step after a load bit for bit with a run that never offloaded.",
        True,
        bool,
        target="reference_check",
    ),
    _o(
        "optimizer_first",
        "Order of the moves within a cycle: optimizer state before "
        "parameters in both offload and load (megatron-core's own optimizer offload needs it "
        "under --precision-aware), or parameters first (verl's order, the default).",
        False,
        bool,
        off_flag="--params-first",
        target="optimizer_first",
    ),
    _o(
        "strategy_option",
        "An option for the strategy, key=value (repeatable), e.g. threads=16 for pipelined.",
        (),
        repeatable=True,
        target="strategy_options",
    ),
    # the optimizer
    _o(
        "precision_aware",
        "megatron's precision-aware optimizer (master weights in the optimizer state).",
        False,
        bool,
        off_flag="--classic",
        target="optimizer.precision_aware",
        group="optimizer",
    ),
    _o(
        "exp_avg_dtype",
        "fp32, bf16, fp16 or uint8 (precision-aware only).",
        "fp32",
        target="optimizer.exp_avg_dtype",
        group="optimizer",
    ),
    _o(
        "exp_avg_sq_dtype",
        "fp32, bf16, fp16 or uint8 (precision-aware only).",
        "fp32",
        target="optimizer.exp_avg_sq_dtype",
        group="optimizer",
    ),
    _o(
        "store_param_remainders",
        "Precision-aware: keep int16 remainders of the fp32 master weights.",
        False,
        bool,
        target="optimizer.store_param_remainders",
        group="optimizer",
    ),
    # parallel sizes and ranks
    _o("tp", "Tensor-parallel size.", 1, int, target="parallel.tp", group="ranks"),
    _o("pp", "Pipeline-parallel size.", 1, int, target="parallel.pp", group="ranks"),
    _o("ep", "Expert-parallel size (MoE).", 1, int, target="parallel.ep", group="ranks"),
    _o("cp", "Context-parallel size.", 1, int, target="parallel.cp", group="ranks"),
    _o(
        "vpp",
        "Virtual pipeline stages per pipeline rank.",
        None,
        int,
        target="parallel.vpp",
        group="ranks",
    ),
    _o("shards", SHARDS_HELP, None, int, target="parallel.shards", group="ranks", verbs=_FS),
    _o("shard_rank", RANK_HELP, 0, int, target="parallel.shard_rank", group="ranks", verbs=_FS),
    _o(
        "nproc_per_node",
        "Ranks on this node, started through torchrun's launcher inside one "
        "node memory cgroup (NCCL on CUDA, gloo on CPU).",
        1,
        int,
        group="ranks",
    ),
    _o(
        "nnodes",
        "Nodes (torchrun agents); start one run per node.",
        1,
        int,
        group="ranks",
        verbs=frozenset({RUN}),
    ),
    _o(
        "rdzv_endpoint",
        "host:port of the c10d rendezvous (with --nnodes).",
        group="ranks",
        verbs=frozenset({RUN}),
    ),
    _o(
        "host_limit",
        "Run the worker under a real memory cgroup limit: its usage at the first offload "
        "plus this size (e.g. 4GiB), from each offload to the end of its load, as repro "
        "does; page cache no process maps is dropped first. An OOM kill, or a host peak "
        "over it that the kernel let through by reclaiming, fails the run.",
        unit="size",
        verbs=frozenset({RUN}),
    ),
    # budgets
    _o(
        "max_host_peak",
        "Budget: worst host peak over the pre-offload baseline, as a multiple "
        "of the bytes moved (1.1x) or a size (6GiB).",
        unit="budget",
        group="budgets",
    ),
    _o(
        "max_gpu_residual",
        "Budget: device bytes left after each offload (a size, 0 for none), less the "
        "optimizer state --optimizer-strategy none keeps there.",
        unit="budget",
        group="budgets",
    ),
    _o(
        "min_offload_bandwidth",
        "Budget: steady offload rate in GB/s.",
        unit="budget",
        group="budgets",
    ),
    _o(
        "max_host_held",
        "Budget: host bytes the strategy keeps through the train phases (after its "
        "loads), a multiple of the bytes moved (0.05x) or a size (1GiB).",
        unit="budget",
        group="budgets",
    ),
    _o(
        "baseline_json",
        "Regression gate: a result run or compare --json wrote before; each row is held "
        "to the stored row of the same label (with --max-increase).",
        unit="budget",
        group="budgets",
    ),
    _o(
        "baseline_row",
        "Regression gate: the label of the stored row to hold this test to (with "
        "baseline_json=); the test's own label when unset. A stored result without that "
        "row is an error.",
        group="budgets",
        verbs=frozenset({PLUGIN}),
    ),
    _o(
        "max_increase",
        "Regression gate: fail a row whose host peak, steady host, pinned or GPU-left "
        "bytes grew by more than this over --baseline-json, e.g. 5%.",
        unit="budget",
        group="budgets",
    ),
    # how the verb runs
    _o(
        "timeout",
        "Seconds each measured process may run.",
        None,
        float,
        group="output",
        flag="--child-timeout",
    ),
    _o(
        "force",
        "Run even when the estimated host memory exceeds what this process may use.",
        False,
        bool,
        flag="--force",
        off_flag="--no-force",
        group="output",
        verbs=frozenset({RUN, COMPARE}),
    ),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
UNSET: dict[str, Any] = {"rollout_claim_bytes": 0, "sequence": ()}
"""``RunConfig`` fields whose option is unset by default: their value then."""
BUDGET_NAMES = tuple(o.name for o in OPTIONS if o.unit == "budget")
NOT_OPTIONS = frozenset(
    {"model", "strategy", "optimizer_strategy", "optimizer", "parallel", "label"}
)
"""``RunConfig`` fields a verb sets itself (the strategy names, the row's label) or that
group options (``model``, ``optimizer``, ``parallel``)."""


def for_verb(verb: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if verb in o.verbs)


def keywords(verb: str) -> frozenset[str]:
    return frozenset(o.name for o in for_verb(verb))


def defaults(verb: str) -> dict[str, Any]:
    return {o.name: o.default for o in for_verb(verb)}


def _key_values(pairs: Iterable[str], flag: str) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r}: give key=value, e.g. threads=16")
        found[key.strip()] = value.strip()
    return found


def _convert(option: Option, value: Any) -> Any:
    if value is None:
        return None
    if option.unit == "size":
        return parse_size(str(value), what=option.cli_flag)
    if option.unit == "sequence":
        from offloadprobe.core.sequences import parse_sequence

        return parse_sequence(value)
    if option.repeatable:
        return _key_values(value, option.cli_flag)
    return value


def build_config(
    values: Mapping[str, Any],
    *,
    strategy: str = "lazy",
    optimizer_strategy: str = "none",
    label: str | None = None,
    base: RunConfig | None = None,
) -> RunConfig:
    """A validated ``RunConfig`` from option values by name (missing ones: the defaults)."""
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r}")
    merged = {o.name: o.default for o in OPTIONS} | dict(values)
    model: dict[str, Any] = {}
    optimizer: dict[str, Any] = {}
    parallel: dict[str, Any] = {}
    run: dict[str, Any] = {}
    sections = {"model": model, "optimizer": optimizer, "parallel": parallel}
    for option in OPTIONS:
        if option.target is None:
            continue
        value = _convert(option, merged[option.name])
        head, _, tail = option.target.partition(".")
        if tail:
            sections[head][tail] = value
        else:
            run[head] = value if value is not None else UNSET.get(head)
    if model.get("workspace_cache_bytes") is None:
        model["workspace_cache_bytes"] = 0
    config_model = ModelConfig(**model)
    if merged.get("payload") is not None:
        payload = parse_size(str(merged["payload"]), what="--payload")
        size = engine(str(merged.get("engine") or DEFAULT_ENGINE)).size_model or size_for_payload
        config_model = size(config_model, payload)
    fields = dict(
        model=config_model,
        optimizer=OptimizerChoice(**optimizer),
        parallel=ParallelConfig(**parallel),
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        label=label,
        **run,
    )
    if base is not None:
        return replace(base, **fields)
    return RunConfig(**fields)
