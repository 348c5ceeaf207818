"""The scenario reader's primitives: typed keys, choices, sizes, unknown keys, and the
problems found so far.

Every problem a file has is collected, not only the first: a primitive raises
``ScenarioError`` for its key, ``Fields.section`` records it and moves on to the next
table, and a table's key-by-key readers (``known``, ``values``) record each bad key and go
on. ``Fields.finish`` raises them together (``ScenarioErrors``: one line each, under the
file's name), or the one alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import parse_size
from offloadprobe.layout.inputs import LayoutError
from offloadprobe.scenarios.scenario import ScenarioError, ScenarioErrors

T = TypeVar("T")

ALIASES = {  # names users paste from HF configs or megatron flags
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
_NAMES = {int: "an integer", bool: "true or false", str: "a string", float: "a number"}


class Skip(Exception):
    """A table with problems already recorded: its record is not built."""


class Fields:
    """The file's path and the problems found in it so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[ScenarioError] = []

    def fail(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(self.path, key, message)

    def note(self, key: str, message: str) -> None:
        """Record a problem and go on."""
        self.problems.append(self.fail(key, message))

    def section(self, read: Callable[..., T], *args: Any) -> T | None:
        """``read(*args)``, or None with its problem recorded."""
        mark = len(self.problems)
        try:
            found = read(*args)
        except ScenarioError as err:
            self.problems.append(err)
            return None
        except Skip:
            return None
        return None if len(self.problems) > mark else found

    def clean_since(self, mark: int) -> None:
        """Stop building the table's record when a key of it had a problem."""
        if len(self.problems) > mark:
            raise Skip

    def finish(self) -> None:
        if len(self.problems) == 1:
            raise self.problems[0]
        if self.problems:
            raise ScenarioErrors(self.path, self.problems)

    # ---- keys

    def known(self, section: str, t: Mapping[str, Any], valid: tuple[str, ...]) -> None:
        """Record every key of ``t`` that ``section`` does not have, with the nearest."""
        for key in t:
            if key in valid:
                continue
            where = f"{section}.{key}" if section else key
            hint = ALIASES.get(key) if ALIASES.get(key) in valid else None
            hint = hint or next(iter(difflib.get_close_matches(key, valid, n=1, cutoff=0.6)), None)
            listed = ", ".join(dict.fromkeys(valid))
            fix = f"did you mean {hint!r}?" if hint else f"valid keys: {listed}"
            place = f"[{section}]" if section else "the top level"
            self.note(where, f"unknown key {key!r} in {place}; {fix}")

    def values(
        self, section: str, t: Mapping[str, Any], kinds: Mapping[str, type]
    ) -> dict[str, Any]:
        """Each key of ``kinds`` that ``t`` has, typed; each wrong one recorded, left out."""
        out = {}
        for key, kind in kinds.items():
            if key in t:
                try:
                    out[key] = self.typed(f"{section}.{key}", t[key], kind)
                except ScenarioError as err:
                    self.problems.append(err)
        return out

    def table(self, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a [{key}] table, got {_kind(value)}")
        return value

    def get(self, t: Mapping[str, Any], section: str, key: str, kind: type[T]) -> T:
        if key not in t:
            raise self.fail(f"{section}.{key}", f"missing; add {key} = <{kind.__name__}>")
        return self.typed(f"{section}.{key}", t[key], kind)

    def opt(self, t: Mapping[str, Any], section: str, key: str, kind: type[T]) -> T | None:
        return self.typed(f"{section}.{key}", t[key], kind) if key in t else None

    def typed(self, key: str, value: Any, kind: type[T]) -> T:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # type: ignore[return-value]
        if ok:
            return value
        example = {int: "4", bool: "true", str: '"text"', float: "0.5"}.get(kind, "...")
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
