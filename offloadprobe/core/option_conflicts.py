"""Options that cancel each other out: given together, one of them would do nothing.

``--sequence double-offload --cycles 3`` ran the sequence and ignored ``--cycles``;
``--payload`` resized the model over ``--hidden``. Each ``Conflict`` names, in the option
model's names, the options it is about, when it applies, and the one line that says what
to drop. ``check_given`` raises it (exit 2) for whatever gave the options: a command line
(the CLI passes the flags given on it), a pytest marker (its keywords) or a scenario's
``[repro]`` table (its keys), each spelling the names its own way. A single-valued flag
given twice with two values is the CLI's to refuse (``cli/given.py``): a marker or a TOML
table cannot repeat a key.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.options import BY_NAME


def _has_no_rollout(values: Mapping[str, Any]) -> bool:
    from offloadprobe.core.sequences import parse_sequence

    return "rollout" not in parse_sequence(values["sequence"])


def _moves_optimizer(values: Mapping[str, Any]) -> bool:
    """Whether any optimizer strategy of the run is one (a verb's own, not an option)."""
    named = values.get("optimizer_strategy") or "none"
    return any(n != "none" for n in ([named] if isinstance(named, str) else named))


@dataclass(frozen=True, kw_only=True, slots=True)
class Conflict:
    """Options that do nothing together, and the fix in the option model's names."""

    needs: tuple[str, ...]
    """The options that must all be given for the conflict to arise."""
    message: str
    """What is wrong and how to fix it; ``{name}`` is each option as the caller spells it."""
    unless: Callable[[Mapping[str, Any]], bool] | None = None
    """Given the option values: True where the combination still does what it says."""
    also: tuple[str, ...] = ()
    """Options the message names besides ``needs``."""


CONFLICTS: tuple[Conflict, ...] = (
    Conflict(
        needs=("sequence", "cycles"),
        message="{sequence} runs its own steps instead of {cycles} fixed cycles, so {cycles} "
        "would be ignored: drop {cycles} (repeat offload,load in {sequence} for more cycles)",
    ),
    Conflict(
        needs=("payload", "hidden"),
        message="{payload} sizes the model's width and vocabulary itself, so {hidden} would be "
        "ignored: drop {hidden}, or drop {payload} and give the shape ({layers}, {hidden}, "
        "{vocab})",
        also=("layers", "vocab"),
    ),
    Conflict(
        needs=("payload", "vocab"),
        message="{payload} sizes the model's width and vocabulary itself, so {vocab} would be "
        "ignored: drop {vocab}, or drop {payload} and give the shape ({layers}, {hidden}, "
        "{vocab})",
        also=("layers", "hidden"),
    ),
    Conflict(
        needs=("moe_router_topk",),
        message="{moe_router_topk} routes each token to experts, and the model has none: add "
        "{num_experts} N, or drop {moe_router_topk}",
        unless=lambda v: bool(v.get("num_experts")),
        also=("num_experts",),
    ),
    Conflict(
        needs=("rollout_claim", "sequence"),
        message="{rollout_claim} is claimed at the rollout steps of {sequence}, and it has "
        "none: add rollout between an offload and its load (e.g. "
        "train,offload,rollout,load,train), or drop {rollout_claim}",
        unless=lambda v: not _has_no_rollout(v),
    ),
    Conflict(
        needs=("optimizer_first",),
        message="{optimizer_first} puts the optimizer state's moves first, and no optimizer "
        "strategy moves any (none): drop it, or name an optimizer strategy",
        unless=lambda v: not v.get("optimizer_first") or _moves_optimizer(v),
    ),
    Conflict(
        needs=("rdzv_endpoint",),
        message="{rdzv_endpoint} is where ranks meet, and this run has one: add {nnodes} N "
        "(or {nproc_per_node} N), or drop {rdzv_endpoint}",
        unless=lambda v: (v.get("nnodes") or 1) > 1 or (v.get("nproc_per_node") or 1) > 1,
        also=("nnodes", "nproc_per_node"),
    ),
)


def flag_of(name: str) -> str:
    """An option as the command line spells it."""
    return BY_NAME[name].cli_flag


def check_given(
    values: Mapping[str, Any],
    given: Collection[str],
    *,
    spell: Callable[[str], str] = flag_of,
    only: Collection[str] | None = None,
) -> None:
    """Exit 2 (``UsageError``) for the first conflict among the options ``given``
    (``values``: every option's value, given or default). ``spell`` names an option as the
    caller writes it; ``only``: the options this caller has (a conflict over others cannot
    arise there)."""
    present = set(given)
    for conflict in CONFLICTS:
        if not set(conflict.needs) <= present:
            continue
        if only is not None and not set(conflict.needs) <= set(only):
            continue
        if conflict.unless is not None and conflict.unless(values):
            continue
        names = {n: spell(n) for n in (*conflict.needs, *conflict.also)}
        raise UsageError(conflict.message.format(**names))
