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
    [source]       title, url, notes (optional in the user's own scenario)
    [repro]        optional: payload (scaled-down size), cycles

Every key, its type and its default: ``keys.py`` (``docs/scenario-keys.md``). Every
mistake in a file is reported at once (``fields.py``): one ``ScenarioError`` naming the
file, the dotted key and a fix, or ``ScenarioErrors``, one line per problem.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from offloadprobe.core.errors import UsageError
from offloadprobe.layout.inputs import (
    DTYPE_BYTES,
    DdpOptions,
    GptShape,
    Indivisible,
    Parallelism,
    ParamCount,
)
from offloadprobe.layout.optimizer_state import OptimizerOptions
from offloadprobe.layout.parameters import fit_problems
from offloadprobe.scenarios import keys
from offloadprobe.scenarios.fields import ALIASES, Fields, Skip
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


def optimizer_strategies(engine: str | None = None) -> tuple[str, ...]:
    """How optimizer state may be offloaded: every registered optimizer strategy (of those
    that serve ``engine``, where one is named)."""
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES

    names = OPTIMIZER_STRATEGIES.names()
    if engine is None:
        return tuple(names)
    return tuple(n for n in names if OPTIMIZER_STRATEGIES.get(n).serves(engine))


def param_strategies(engine: str | None = None) -> tuple[str, ...]:
    """How the model's parameters may reach the host: every registered model strategy
    (``none`` among them: the parameters stay on the device), of those that serve
    ``engine`` where one is named."""
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    names = MODEL_STRATEGIES.names()
    if engine is None:
        return tuple(names)
    return tuple(n for n in names if MODEL_STRATEGIES.get(n).serves(engine))


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


PARAM_DTYPES = keys.PARAM_DTYPES

_SHAPE_KEYS: dict[str, str] = dict(GptShape.__annotations__)
_SHAPE_TYPES: dict[str, type] = {
    k: bool if "bool" in t else str if ("Literal" in t or t == "str") else int
    for k, t in _SHAPE_KEYS.items()
}
__all__ = ["ALIASES", "Scenario", "ScenarioError", "load_scenario"]


# ---------------------------------------------------------------- loading


def load_scenario(path: Path | str, *, packaged: bool | None = None) -> Scenario:
    """Read and validate one scenario file; every problem it has at once. ``packaged``:
    whether it ships with offloadprobe (then ``[source]`` is needed); default: whether it
    lies in the package's scenarios folder."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(path, "<file>", f"cannot read it ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(path, "<file>", f"not valid TOML: {err}") from err
    if packaged is None:
        packaged = _is_packaged(path)
    reader = _Reader(path, packaged=packaged)
    scenario = reader.scenario(data)
    reader.finish()
    assert scenario is not None
    return scenario


def _is_packaged(path: Path) -> bool:
    from offloadprobe.scenarios.catalog import folder

    try:
        return path.resolve().parent == folder().resolve()
    except OSError:
        return False


class _Reader(Fields):
    def __init__(self, path: Path, *, packaged: bool) -> None:
        super().__init__(path)
        self.packaged = packaged
        self.shape: Any = None
        """The model's shape where only its head dimension is missing: the parallelism is
        still checked against it."""

    # ---- sections

    def scenario(self, data: Mapping[str, Any]) -> Scenario | None:
        self.known("", data, tuple(keys.TABLES))
        required = (*keys.REQUIRED_TABLES, *(("source",) if self.packaged else ()))
        for name in required:
            if name not in data:
                why = "a scenario shipped with offloadprobe needs it" if name == "source" else ""
                self.note(
                    name,
                    f"missing [{name}] table; add it, e.g. [{name}] {keys.EXAMPLES[name]}"
                    + (f" ({why})" if why else ""),
                )
        read = {n: self.section(self.table, data, n) for n in keys.TABLES if n != "expect"}
        model = self.section(self.model, read["model"]) if "model" in data else None
        dtype = model.dtype if model is not None else _dtype(read["model"])
        ddp = self.section(self.ddp, read["ddp"] or {}, dtype)
        par = self.section(self.parallelism, read["parallelism"]) if "parallelism" in data else None
        spec = model.spec if model is not None else self.shape
        if spec is not None and par is not None:
            self.fits(spec, par)
        offload = self.section(self.offload, read["offload"]) if "offload" in data else None
        limit = self.section(self.limit, read["limit"]) if "limit" in data else None
        expect = self.section(self.expect, data["expect"]) if "expect" in data else None
        source = self.section(self.source, read["source"]) if "source" in data else None
        repro = self.section(self.repro, read["repro"]) if "repro" in data else None
        if self.problems:
            return None
        assert model and par and ddp and offload and limit and expect
        return Scenario(
            path=self.path,
            model=model,
            parallelism=par,
            ddp=ddp,
            offload=offload,
            limit=limit,
            expect=expect,
            source=source,
            repro=repro,
        )

    def fits(self, spec: Any, par: Parallelism) -> None:
        """Every reason megatron could not split the model, each naming the keys that fix it."""
        for err in fit_problems(spec, par):
            if isinstance(err, Indivisible):
                self.problems.append(_indivisible(self.path, err))
            else:
                section = "parallelism" if err.field in Parallelism.__annotations__ else "model"
                self.note(f"{section}.{err.field}", err.message)

    def model(self, t: Mapping[str, Any] | None) -> ModelSection:
        if t is None:
            raise _skip()
        mark = len(self.problems)
        shape_keys = tuple(_SHAPE_KEYS)
        self.known("model", t, keys.names("model"))
        dtype = self.section(self.choice, "model.dtype", t.get("dtype", "bfloat16"), PARAM_DTYPES)
        name = self.section(self.opt, t, "model", "name", str)
        self.section(self.opt, t, "model", "moe_router_topk", int)  # no effect on buffer sizes
        given = [k for k in shape_keys if k in t]
        if "params" in t:
            if given:
                raise self.fail(
                    f"model.{given[0]}",
                    "give either params (+ expert_params) or the shape keys, not both",
                )
            counts = self.values("model", t, {"params": int, "expert_params": int})
            self.clean_since(mark)
            spec = self.build(
                "model",
                ParamCount,
                {"total_params": counts["params"], "expert_params": counts.get("expert_params", 0)},
            )
            return ModelSection(spec=spec, dtype=dtype or "bfloat16", name=name)
        if "expert_params" in t:
            self.note("model.expert_params", "only with params; set params too")
        values = self.values("model", t, {k: _SHAPE_TYPES[k] for k in given})
        for key in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            if key not in t:
                self.note(
                    f"model.{key}",
                    "missing; a shape needs num_layers, hidden_size, num_attention_heads, "
                    "vocab_size and kv_channels (or use params)",
                )
        for key, options in (
            ("normalization", ("RMSNorm", "LayerNorm")),
            ("position_embedding", ("rope", "learned_absolute")),
        ):
            if key in values:
                self.section(self.choice, f"model.{key}", values[key], options)
        no_head_dim = "kv_channels" not in t
        if no_head_dim:
            self.note("model.kv_channels", _no_head_dim(values))
        self.clean_since(mark + no_head_dim)
        spec = self.build("model", GptShape, values)
        if no_head_dim:
            self.shape = spec  # still checked against the parallelism
            raise Skip
        return ModelSection(spec=spec, dtype=dtype or "bfloat16", name=name)

    def parallelism(self, t: Mapping[str, Any] | None) -> Parallelism:
        if t is None:
            raise _skip()
        mark = len(self.problems)
        names = keys.names("parallelism")
        self.known("parallelism", t, names)
        for key in ("tp", "pp", "dp", "gpus_per_node"):
            if key not in t:
                self.note(f"parallelism.{key}", f"missing; add {key} = <int>")
        values = self.values("parallelism", t, {k: int for k in names})
        self.clean_since(mark)
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
        mark = len(self.problems)
        bools = ("grad_reduce_in_fp32", "overlap_grad_reduce", "pad_buckets_for_high_nccl_busbw")
        self.known("ddp", t, keys.names("ddp"))
        values: dict[str, Any] = self.values("ddp", t, {**{k: bool for k in bools}})
        values["bucket_size"] = self.opt(t, "ddp", "bucket_size", int)
        self.clean_since(mark)
        return self.build("ddp", DdpOptions, {"param_dtype": dtype, **values})

    def offload(self, t: Mapping[str, Any] | None) -> OffloadSection:
        if t is None:
            raise _skip()
        mark = len(self.problems)
        dtypes = ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        self.known("offload", t, keys.names("offload"))
        opt: dict[str, Any] = {}
        for k in dtypes:
            if k in t:
                typed = self.section(self.get, t, "offload", k, str)
                if typed is not None:
                    opt[k] = self.section(self.choice, f"offload.{k}", typed, tuple(DTYPE_BYTES))
        opt |= self.values("offload", t, {"precision_aware": bool, "store_param_remainders": bool})
        moves = {k: self.section(self.get, t, "offload", k, bool) for k in PARTS_MOVED}
        self.clean_since(mark)
        return OffloadSection(
            params=bool(moves["params"]),
            grads=bool(moves["grads"]),
            optimizer=bool(moves["optimizer"]),
            optimizer_options=self.build("offload", OptimizerOptions, opt),
        )

    def limit(self, t: Mapping[str, Any] | None) -> LimitSection:
        if t is None:
            raise _skip()
        mark = len(self.problems)
        names = keys.names("limit")
        self.known("limit", t, names)
        values = {k: self.section(self.size, f"limit.{k}", t[k]) for k in names if k in t}
        self.clean_since(mark)
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
                self.note(
                    f"limit.{reserved_key}",
                    f"{t[reserved_key]!r} is at or above {limit_key} {t[limit_key]!r}: nothing "
                    f"is left for the trainer; lower {reserved_key} or raise {limit_key}",
                )
        self.clean_since(mark)
        return LimitSection(**{k: v for k, v in values.items() if v is not None})

    def expect(self, raw: Any) -> tuple[Expectation, ...]:
        mark = len(self.problems)
        items: list[tuple[str, str, str, Any, str | None]] = []
        if isinstance(raw, Mapping):
            for k, v in raw.items():
                if k in PARTS and isinstance(v, Mapping):  # [expect.params] mcore = "ok"
                    items += [
                        (f"expect.{k}.{n}",) * 2 + (f"{k}.{n}", o, None) for n, o in v.items()
                    ]
                else:
                    items.append((f"expect.{k}", f"expect.{k}", k, v, None))
        elif isinstance(raw, list) and all(isinstance(e, Mapping) for e in raw):
            for i, entry in enumerate(raw):
                found = self.section(self._expect_entry, f"expect[{i}]", entry)
                if found is not None:
                    items.append(found)
        else:
            raise self.fail("expect", 'use a table (naive = "oom") or [[expect]] tables')
        if not items and len(self.problems) == mark:
            raise self.fail("expect", 'expect at least one outcome, e.g. naive = "oom"')
        out, seen = [], set()
        for name_key, key, given, outcome, note in items:
            try:
                kind, strategy = strategy_part(given, where="")
            except UsageError as exc:
                self.problems.append(
                    ScenarioError(self.path, name_key, str(exc).removeprefix(": "))
                )
                continue
            if (kind, strategy) in seen:
                self.note(key, f"{strategy} is expected twice; keep one")
                continue
            seen.add((kind, strategy))
            if self.section(self.choice, key, outcome, ("oom", "ok")) is not None:
                out.append(Expectation(strategy=strategy, outcome=outcome, kind=kind, note=note))
        self.clean_since(mark)
        return tuple(out)

    def _expect_entry(
        self, where: str, entry: Mapping[str, Any]
    ) -> tuple[str, str, str, Any, str | None]:
        mark = len(self.problems)
        self.known(where, entry, keys.names("expect"))
        strategy = self.section(self.get, entry, where, "strategy", str)
        part = self.section(self.opt, entry, where, "part", str)
        outcome = self.section(self.get, entry, where, "outcome", str)
        note = self.section(self.opt, entry, where, "note", str)
        if part is not None:
            self.section(self.choice, f"{where}.part", part, PARTS)
        self.clean_since(mark)
        name = f"{part}.{strategy}" if part is not None else str(strategy)
        return (f"{where}.strategy", f"{where}.outcome", name, outcome, note)

    def source(self, t: Mapping[str, Any] | None) -> Source:
        if t is None:
            raise _skip()
        mark = len(self.problems)
        self.known("source", t, keys.names("source"))
        title = self.section(self.get, t, "source", "title", str)
        url = self.section(self.opt, t, "source", "url", str)
        notes = self.section(self.opt, t, "source", "notes", str)
        self.clean_since(mark)
        return Source(title=str(title), url=url, notes=notes)

    def repro(self, t: Mapping[str, Any] | None) -> Repro:
        from offloadprobe.core.option_conflicts import check_given
        from offloadprobe.core.options import BY_NAME, SCENARIO
        from offloadprobe.core.options import keywords as option_keys

        if t is None:
            raise _skip()
        mark = len(self.problems)
        scenario_keys = option_keys(SCENARIO)
        self.known("repro", t, (*sorted(scenario_keys), *keys.names("repro")))
        options = {}
        for key in sorted(scenario_keys - {"payload", "cycles"}):
            if key in t:
                if BY_NAME[key].unit == "size":
                    self.section(self.size, f"repro.{key}", t[key])  # refused without its unit
                typed = self.section(self.get, t, "repro", key, BY_NAME[key].type)
                if typed is not None:
                    options[key] = typed
        try:
            check_given(dict(t), t.keys(), spell=lambda n: f"[repro] {n}", only=scenario_keys)
        except UsageError as exc:
            self.note("repro", str(exc))
        if "payload" not in t:
            self.note("repro.payload", 'missing; add payload = "64MiB"')
        cycles = self.section(self.opt, t, "repro", "cycles", int)
        if cycles is not None and cycles < 1:
            self.note("repro.cycles", f"must be at least 1, got {cycles}")
        ranks = self.section(self.opt, t, "repro", "ranks_per_node", int)
        if ranks is not None and ranks < 1:
            self.note("repro.ranks_per_node", f"must be at least 1, got {ranks}")
        payload = self.section(self.size, "repro.payload", t["payload"]) if "payload" in t else 0
        self.clean_since(mark)
        return Repro(
            payload=int(payload or 0),
            cycles=3 if cycles is None else cycles,
            ranks_per_node=1 if ranks is None else ranks,
            options=options,
        )


PARTS_MOVED = ("params", "grads", "optimizer")


def _skip() -> Skip:
    return Skip()


def _dtype(t: Mapping[str, Any] | None) -> str:
    dtype = (t or {}).get("dtype", "bfloat16")
    return dtype if dtype in PARAM_DTYPES else "bfloat16"


def _no_head_dim(values: Mapping[str, Any]) -> str:
    """The fix for a shape without ``kv_channels``: megatron's default is right only where
    the model has no head_dim of its own."""
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    default = ""
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        default = f" = {hidden // heads}" if hidden % heads == 0 else " (not a whole number)"
    return (
        "missing; set it to the model's head dimension (head_dim in its config.json). "
        f"hidden_size / num_attention_heads{default} is right only for a model whose config "
        "has no head_dim (Qwen3's is 128 where 4096 / 64 = 64), so it is not assumed"
    )


def _indivisible(path: Path, err: Indivisible) -> ScenarioError:
    """``[model] num_layers=94 is not divisible by [parallelism] pp=8: set pp to a
    divisor of 94 (1, 2, 47, 94) or change num_layers to a multiple of 8 ...``."""
    divisors = err.divisors()
    shown = ", ".join(str(d) for d in divisors) + (", ..." if len(divisors) == 12 else "")
    value_key = f"[model] {err.value_name}={err.value}"
    by_key = f"[parallelism] {err.by}={err.divisor}"
    fix = (
        f"set {err.by} to a divisor of {err.value} ({shown}) or change {err.value_name} to a "
        f"multiple of {err.divisor} (e.g. {err.next_multiple})"
    )
    if err.by == "pp":
        fix += ", or split the layers unevenly with first_stage_layers and last_stage_layers"
    section = "parallelism" if err.field in Parallelism.__annotations__ else "model"
    return ScenarioError(
        path,
        f"{section}.{err.field}",
        f"{value_key} is not divisible by {by_key}: {fix}",
        named=True,
    )
