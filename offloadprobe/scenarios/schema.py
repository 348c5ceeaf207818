"""The scenario file: a strict TOML schema and ``load_scenario(path) -> Scenario``.

A scenario describes one production setup from an OOM report, what the report says
each offload strategy does there, and where it came from::

    [model]        params (+ expert_params), or a GPT/MoE shape; dtype
    [parallelism]  tp, pp, ep, dp, gpus_per_node (+ nodes, first/last_stage_layers)
    [ddp]          optional: grad_reduce_in_fp32, overlap_grad_reduce, bucket_size, ...
    [offload]      params, grads, optimizer (bools); precision_aware and its dtypes
    [limit]        host_memory_per_node, gpu_memory_per_device (size strings) and what
                   else the node or GPU holds meanwhile (host/gpu_reserved_...)
    [expect]       strategy = "oom" | "ok"   (or [[expect]] tables with a note)
    [source]       title, url, notes
    [repro]        optional: payload (scaled-down size), cycles

Every mistake raises ``ScenarioError`` naming the file, the dotted key and a fix.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import parse_size
from offloadprobe.layout.inputs import (
    DTYPE_BYTES,
    DdpOptions,
    GptShape,
    LayoutError,
    Parallelism,
    ParamCount,
)
from offloadprobe.layout.optimizer_state import OptimizerOptions
from offloadprobe.layout.parameters import check_model_fits
from offloadprobe.scenarios.scenario import (
    Expectation,
    LimitSection,
    ModelSection,
    OffloadSection,
    Repro,
    Scenario,
    ScenarioError,
    Source,
)


def optimizer_strategies() -> tuple[str, ...]:
    """How optimizer state may be offloaded: every registered optimizer strategy."""
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES

    return tuple(OPTIMIZER_STRATEGIES.names())


def param_strategies() -> tuple[str, ...]:
    """How the model's DDP buffers may reach the host: every registered model strategy
    (``none`` among them: the parameters stay on the device)."""
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    return tuple(MODEL_STRATEGIES.names())


PARTS = ("params", "optimizer")


def strategy_part(name: str, where: str = "strategy") -> tuple[Literal["params", "optimizer"], str]:
    """``(part, name)`` of an expectation's key: ``params.mcore`` and ``optimizer.mcore``
    say the part; a bare name says it where only one registry has the name; the user's own
    ``package.module:...`` is a parameter strategy unless prefixed ``optimizer.``."""
    from offloadprobe.core.registry import is_user_spec

    for part in PARTS:
        if name.startswith(part + "."):
            rest = name[len(part) + 1 :]
            known = param_strategies() if part == "params" else optimizer_strategies()
            if rest not in known and not is_user_spec(rest):
                choices = ", ".join(known)
                raise UsageError(f"{where}: {part} strategy {rest!r} is not one of {choices}")
            return part, rest  # type: ignore[return-value]
    if is_user_spec(name):
        return "params", name
    model, optimizer = name in param_strategies(), name in optimizer_strategies()
    if model and optimizer:
        raise UsageError(
            f"{where}: {name!r} names both a parameter and an optimizer strategy: write "
            f"params.{name} or optimizer.{name}"
        )
    if not model and not optimizer:
        near = difflib.get_close_matches(name, [*param_strategies(), *optimizer_strategies()], 1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UsageError(
            f"{where}: unknown key (strategy) {name!r}{hint}: a registered name, params.NAME, "
            "optimizer.NAME, or your own package.module:object"
        )
    return ("params" if model else "optimizer"), name


def strategy_kind(strategy: str) -> Literal["params", "optimizer"]:
    """Which registry a name belongs to (a name in both: the parameters')."""
    return "params" if strategy in param_strategies() else "optimizer"


PARAM_DTYPES = ("bfloat16", "float16", "float32")

_SHAPE_KEYS: dict[str, str] = dict(GptShape.__annotations__)
_ALIASES = {  # names users paste from HF configs or megatron flags
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "expert_model_parallel_size": "ep",
    "data_parallel_size": "dp",
    "num_moe_experts": "num_experts",
    "num_key_value_heads": "num_query_groups",
    "num_hidden_layers": "num_layers",
    "intermediate_size": "ffn_hidden_size",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "head_dim": "kv_channels",
    "gated_linear_unit": "swiglu",
    "num_layers_in_first_pipeline_stage": "first_stage_layers",
    "num_layers_in_last_pipeline_stage": "last_stage_layers",
    "use_precision_aware_optimizer": "precision_aware",
}


# ---------------------------------------------------------------- loading


def load_scenario(path: Path | str) -> Scenario:
    """Read and validate one scenario file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(path, "<file>", f"cannot read it ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(path, "<file>", f"not valid TOML: {err}") from err
    return _Reader(path).scenario(data)


T = TypeVar("T")


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(self.path, key, message)

    # ---- sections

    def scenario(self, data: Mapping[str, Any]) -> Scenario:
        tables = ("model", "parallelism", "ddp", "offload", "limit", "expect", "source", "repro")
        self.known("", data, tables)
        required = ("model", "parallelism", "offload", "limit", "expect", "source")
        for name in required:
            if name not in data:
                raise self.fail(
                    name,
                    f"missing [{name}] table; every scenario needs "
                    f"{', '.join(f'[{t}]' for t in required)}",
                )
        model = self.model(self.table(data, "model"))
        ddp = self.ddp(self.table(data, "ddp") if "ddp" in data else {}, model.dtype)
        par = self.parallelism(self.table(data, "parallelism"))
        try:
            check_model_fits(model.spec, par)
        except LayoutError as err:
            section = "parallelism" if err.field in Parallelism.__annotations__ else "model"
            raise self.fail(f"{section}.{err.field}", err.message) from err
        return Scenario(
            path=self.path,
            model=model,
            parallelism=par,
            ddp=ddp,
            offload=self.offload(self.table(data, "offload")),
            limit=self.limit(self.table(data, "limit")),
            expect=self.expect(data["expect"]),
            source=self.source(self.table(data, "source")),
            repro=self.repro(self.table(data, "repro")) if "repro" in data else None,
        )

    def model(self, t: Mapping[str, Any]) -> ModelSection:
        shape_keys = tuple(_SHAPE_KEYS)
        self.known(
            "model", t, ("name", "dtype", "params", "expert_params", "moe_router_topk", *shape_keys)
        )
        dtype = self.choice("model.dtype", t.get("dtype", "bfloat16"), PARAM_DTYPES)
        name = self.opt(t, "model", "name", str)
        self.opt(t, "model", "moe_router_topk", int)  # accepted; no effect on buffer sizes
        given = [k for k in shape_keys if k in t]
        if "params" in t:
            if given:
                raise self.fail(
                    f"model.{given[0]}",
                    "give either params (+ expert_params) or the shape keys, not both",
                )
            return ModelSection(
                spec=self.build(
                    "model",
                    ParamCount,
                    {
                        "total_params": self.get(t, "model", "params", int),
                        "expert_params": self.opt(t, "model", "expert_params", int) or 0,
                    },
                ),
                dtype=dtype,
                name=name,
            )
        if "expert_params" in t:
            raise self.fail("model.expert_params", "only with params; set params too")
        values = {k: self.get(t, "model", k, _SHAPE_TYPES[k]) for k in given}
        for key in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            if key not in values:
                raise self.fail(
                    f"model.{key}",
                    "missing; a shape needs num_layers, "
                    "hidden_size, num_attention_heads and vocab_size (or use params)",
                )
        for key, options in (
            ("normalization", ("RMSNorm", "LayerNorm")),
            ("position_embedding", ("rope", "learned_absolute")),
        ):
            if key in values:
                self.choice(f"model.{key}", values[key], options)
        return ModelSection(spec=self.build("model", GptShape, values), dtype=dtype, name=name)

    def parallelism(self, t: Mapping[str, Any]) -> Parallelism:
        keys = (
            "tp",
            "pp",
            "ep",
            "dp",
            "gpus_per_node",
            "nodes",
            "first_stage_layers",
            "last_stage_layers",
        )
        self.known("parallelism", t, keys)
        for key in ("tp", "pp", "dp", "gpus_per_node"):
            self.get(t, "parallelism", key, int)
        values = {k: self.get(t, "parallelism", k, int) for k in keys if k in t}
        nodes = values.pop("nodes", None)
        par = self.build("parallelism", Parallelism, values)
        if nodes is not None and nodes * par.gpus_per_node != par.world_size:
            raise self.fail(
                "parallelism.nodes",
                f"{nodes} nodes x {par.gpus_per_node} GPUs = "
                f"{nodes * par.gpus_per_node}, but tp*pp*dp = {par.world_size}; "
                "make dp = nodes*gpus_per_node / (tp*pp)",
            )
        return par

    def ddp(self, t: Mapping[str, Any], dtype: str) -> DdpOptions:
        bools = ("grad_reduce_in_fp32", "overlap_grad_reduce", "pad_buckets_for_high_nccl_busbw")
        self.known("ddp", t, (*bools, "bucket_size"))
        values: dict[str, Any] = {k: self.get(t, "ddp", k, bool) for k in bools if k in t}
        values["bucket_size"] = self.opt(t, "ddp", "bucket_size", int)
        return self.build("ddp", DdpOptions, {"param_dtype": dtype, **values})

    def offload(self, t: Mapping[str, Any]) -> OffloadSection:
        dtypes = ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        self.known(
            "offload",
            t,
            ("params", "grads", "optimizer", "precision_aware", "store_param_remainders", *dtypes),
        )
        opt: dict[str, Any] = {
            k: self.choice(f"offload.{k}", self.get(t, "offload", k, str), tuple(DTYPE_BYTES))
            for k in dtypes
            if k in t
        }
        for key in ("precision_aware", "store_param_remainders"):
            if key in t:
                opt[key] = self.get(t, "offload", key, bool)
        return OffloadSection(
            params=self.get(t, "offload", "params", bool),
            grads=self.get(t, "offload", "grads", bool),
            optimizer=self.get(t, "offload", "optimizer", bool),
            optimizer_options=self.build("offload", OptimizerOptions, opt),
        )

    def limit(self, t: Mapping[str, Any]) -> LimitSection:
        keys = (
            "host_memory_per_node",
            "gpu_memory_per_device",
            "host_reserved_per_node",
            "gpu_reserved_per_device",
        )
        self.known("limit", t, keys)
        values = {k: self.size(f"limit.{k}", t[k]) for k in keys if k in t}
        if not {"host_memory_per_node", "gpu_memory_per_device"} & values.keys():
            raise self.fail(
                "limit.host_memory_per_node",
                "set host_memory_per_node or "
                'gpu_memory_per_device, e.g. host_memory_per_node = "1700GiB"',
            )
        for what in ("host", "gpu"):
            limit_key = f"{what}_memory_per_node" if what == "host" else "gpu_memory_per_device"
            reserved_key = f"{what}_reserved_per_{limit_key.rsplit('_', 1)[1]}"
            limit, reserved = values.get(limit_key), values.get(reserved_key)
            if limit is not None and reserved is not None and reserved >= limit:
                raise self.fail(
                    f"limit.{reserved_key}",
                    f"{t[reserved_key]!r} is at or above {limit_key} {t[limit_key]!r}: nothing "
                    f"is left for the trainer; lower {reserved_key} or raise {limit_key}",
                )
        return LimitSection(**values)

    def expect(self, raw: Any) -> tuple[Expectation, ...]:
        if isinstance(raw, Mapping):
            items = []
            for k, v in raw.items():
                if k in PARTS and isinstance(v, Mapping):  # [expect.params] mcore = "ok"
                    items += [
                        (f"expect.{k}.{n}",) * 2 + (f"{k}.{n}", o, None) for n, o in v.items()
                    ]
                else:
                    items.append((f"expect.{k}", f"expect.{k}", k, v, None))
        elif isinstance(raw, list) and all(isinstance(e, Mapping) for e in raw):
            items = []
            for i, entry in enumerate(raw):
                where = f"expect[{i}]"
                self.known(where, entry, ("strategy", "part", "outcome", "note"))
                strategy = self.get(entry, where, "strategy", str)
                part = self.opt(entry, where, "part", str)
                if part is not None:
                    self.choice(f"{where}.part", part, PARTS)
                    strategy = f"{part}.{strategy}"
                items.append(
                    (
                        f"{where}.strategy",
                        f"{where}.outcome",
                        strategy,
                        self.get(entry, where, "outcome", str),
                        self.opt(entry, where, "note", str),
                    )
                )
        else:
            raise self.fail("expect", 'use a table (naive = "oom") or [[expect]] tables')
        if not items:
            raise self.fail("expect", 'expect at least one outcome, e.g. naive = "oom"')
        out, seen = [], set()
        for name_key, key, given, outcome, note in items:
            try:
                kind, strategy = strategy_part(given, where="")
            except UsageError as exc:
                raise ScenarioError(self.path, name_key, str(exc).removeprefix(": ")) from None
            if (kind, strategy) in seen:
                raise self.fail(key, f"{strategy} is expected twice; keep one")
            seen.add((kind, strategy))
            self.choice(key, outcome, ("oom", "ok"))
            out.append(Expectation(strategy=strategy, outcome=outcome, kind=kind, note=note))
        return tuple(out)

    def source(self, t: Mapping[str, Any]) -> Source:
        self.known("source", t, ("title", "url", "notes"))
        return Source(
            title=self.get(t, "source", "title", str),
            url=self.opt(t, "source", "url", str),
            notes=self.opt(t, "source", "notes", str),
        )

    def repro(self, t: Mapping[str, Any]) -> Repro:
        from offloadprobe.core.options import BY_NAME, SCENARIO, keywords

        scenario_keys = keywords(SCENARIO)
        self.known("repro", t, (*sorted(scenario_keys), "ranks_per_node"))
        options = {}
        for key in sorted(scenario_keys - {"payload", "cycles"}):
            if key in t:
                if BY_NAME[key].unit == "size":
                    self.size(f"repro.{key}", t[key])  # refused here without its unit
                options[key] = self.get(t, "repro", key, BY_NAME[key].type)
        if "payload" not in t:
            raise self.fail("repro.payload", 'missing; add payload = "64MiB"')
        cycles = self.opt(t, "repro", "cycles", int)
        if cycles is not None and cycles < 1:
            raise self.fail("repro.cycles", f"must be at least 1, got {cycles}")
        ranks = self.opt(t, "repro", "ranks_per_node", int)
        if ranks is not None and ranks < 1:
            raise self.fail("repro.ranks_per_node", f"must be at least 1, got {ranks}")
        return Repro(
            payload=self.size("repro.payload", t["payload"]),
            cycles=3 if cycles is None else cycles,
            ranks_per_node=1 if ranks is None else ranks,
            options=options,
        )

    # ---- primitives

    def table(self, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a [{key}] table, got {_kind(value)}")
        return value

    def known(self, section: str, t: Mapping[str, Any], valid: tuple[str, ...]) -> None:
        for key in t:
            if key in valid:
                continue
            where = f"{section}.{key}" if section else key
            hint = _ALIASES.get(key) if _ALIASES.get(key) in valid else None
            hint = hint or next(iter(difflib.get_close_matches(key, valid, n=1, cutoff=0.6)), None)
            fix = f"did you mean {hint!r}?" if hint else f"valid keys: {', '.join(valid)}"
            place = f"[{section}]" if section else "the top level"
            raise self.fail(where, f"unknown key {key!r} in {place}; {fix}")

    def get(self, t: Mapping[str, Any], section: str, key: str, kind: type[T]) -> T:
        if key not in t:
            raise self.fail(f"{section}.{key}", f"missing; add {key} = <{kind.__name__}>")
        return self.typed(f"{section}.{key}", t[key], kind)

    def opt(self, t: Mapping[str, Any], section: str, key: str, kind: type[T]) -> T | None:
        return self.typed(f"{section}.{key}", t[key], kind) if key in t else None

    def typed(self, key: str, value: Any, kind: type[T]) -> T:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if ok:
            return value
        example = {int: "4", bool: "true", str: '"text"'}.get(kind, "...")
        raise self.fail(
            key,
            f"expected {_NAMES.get(kind, kind.__name__)}, got "
            f"{_kind(value)} {value!r}; write e.g. {key.rsplit('.', 1)[-1]} = "
            f"{example}",
        )

    def choice(self, key: str, value: Any, options: tuple[str, ...]) -> str:
        if value not in options:
            lowered = {o.lower(): o for o in options}
            near = (
                [lowered[str(value).lower()]]
                if str(value).lower() in lowered
                else (difflib.get_close_matches(str(value), options, n=1, cutoff=0.5))
            )
            fix = f"did you mean {near[0]!r}?" if near else f"use one of {', '.join(options)}"
            raise self.fail(key, f"{value!r} is not allowed; {fix}")
        return value

    def size(self, key: str, value: Any) -> int:
        """A size string with its unit; a bare number (``512``, ``"512"``) is refused, not
        read as bytes (``512`` meant 512 GiB and made every strategy "OOM")."""
        if isinstance(value, int) and not isinstance(value, bool):
            raise self.fail(key, _no_unit(value))
        if not isinstance(value, str):
            raise self.fail(key, f'expected a size string like "1700GiB", got {_kind(value)}')
        if value.strip().replace(".", "", 1).isdigit():
            raise self.fail(key, _no_unit(value.strip()))
        try:
            return parse_size(value, what="size")
        except UsageError as err:
            raise self.fail(key, f'{err}; binary units: "64MiB", "1700GiB"') from err

    def build(self, section: str, factory: Callable[..., T], values: dict[str, Any]) -> T:
        try:
            return factory(**values)
        except LayoutError as err:
            key = {"total_params": "params"}.get(err.field, err.field)
            raise self.fail(f"{section}.{key}", err.message) from err


_SHAPE_TYPES: dict[str, type] = {
    k: bool if "bool" in t else str if ("Literal" in t or t == "str") else int
    for k, t in _SHAPE_KEYS.items()
}
_NAMES = {int: "an integer", bool: "true or false", str: "a string"}


def _no_unit(value: Any) -> str:
    return f'{value!r} has no unit: give a unit, e.g. "{value}GiB" (binary: KiB, MiB, GiB, TiB)'


def _kind(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }.get(type(value), type(value).__name__)
