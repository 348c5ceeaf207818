"""What a command line gave, checked before the verb runs: no flag twice, no flag that
another one cancels.

Click keeps the last value of a single-valued flag given twice, so ``run --strategy naive
--strategy lazy`` measured lazy alone. Every verb's parser is watched here: each value a
single-valued option receives is recorded, and two different values of one option are one
line and exit 2 (the same value twice is harmless, as a script's shared flags may repeat
``--no-progress``). The options given on the command line, with every value parsed, then go
through the option model's conflicts (``core.option_conflicts``): ``--sequence`` with
``--cycles``, ``--payload`` with ``--hidden``...

Click is reached by duck typing (typer releases differ in whether they vendor it): its
parser's options record what they store, ``Context.get_parameter_source`` says what came
from the command line.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.errors import UsageError

HELP = ("--help", "-h")
HINTS = {
    ("run", "strategy"): "; to measure both, offloadprobe compare {0} {1}",
    ("run", "optimizer_strategy"): (
        "; to measure both, offloadprobe compare STRATEGY --optimizer-strategy {0} "
        "--optimizer-strategy {1}"
    ),
}
"""What to do instead, where a verb's flag is one another verb repeats."""


def install(command: Any) -> None:
    """Watch every subcommand of ``command`` (typer's click group), once."""
    for sub in getattr(command, "commands", {}).values():
        if not getattr(sub, "_offloadprobe_watched", False):
            _watch(sub)
            sub._offloadprobe_watched = True


def _watch(command: Any) -> None:
    original_parse = command.parse_args
    make_parser = command.make_parser

    def parse_args(ctx: Any, args: list[str]) -> list[str]:
        if any(a in HELP for a in args):
            return original_parse(ctx, args)
        parser = make_parser(ctx)
        seen = _recording(parser)
        parser.parse_args(args=list(args))  # the usage errors the real parse would raise
        _no_two_values(command.name or "", seen)
        rest = original_parse(ctx, args)
        _no_conflict(ctx, command)
        return rest

    command.parse_args = parse_args


def _recording(parser: Any) -> list[tuple[Any, Any, str]]:
    """Make each single-valued option of ``parser`` record ``(param, value, as typed)``."""
    seen: list[tuple[Any, Any, str]] = []
    options = {
        id(o): o
        for table in ("_long_opt", "_short_opt")
        for o in getattr(parser, table, {}).values()
    }
    for option in options.values():
        param = getattr(option, "obj", None)
        if option.action not in ("store", "store_const") or getattr(param, "multiple", True):
            continue
        if getattr(param, "count", False):
            continue
        process = option.process

        def recorded(value: Any, state: Any, option: Any = option, process: Any = process) -> None:
            stored = option.const if option.action == "store_const" else value
            typed = _spelling(option, stored)
            seen.append((option.obj, stored, typed))
            process(value, state)

        option.process = recorded
    return seen


def _spelling(option: Any, stored: Any) -> str:
    """How the user typed it: the value of an option, the flag itself for a boolean."""
    if option.action != "store_const":
        return str(stored)
    param = option.obj
    on, off = list(getattr(param, "opts", [])), list(getattr(param, "secondary_opts", []))
    return (on if stored else off or on)[-1] if (on or off) else str(stored)


def _no_two_values(verb: str, seen: list[tuple[Any, Any, str]]) -> None:
    first: dict[str, tuple[Any, str]] = {}
    for param, value, typed in seen:
        name = param.name
        if name not in first:
            first[name] = (value, typed)
            continue
        before, typed_before = first[name]
        if before == value:
            continue
        if getattr(param, "is_flag", False):
            raise UsageError(
                f"{typed_before} and {typed} are both given and say the opposite: keep one"
            )
        flag = max(getattr(param, "opts", [name]), key=len)
        hint = HINTS.get((verb, name), "").format(typed_before, typed)
        raise UsageError(
            f"{flag} is given twice ({typed_before}, then {typed}) and {verb} takes one: "
            f"keep one{hint}"
        )


def _no_conflict(ctx: Any, command: Any) -> None:
    from offloadprobe.core.option_conflicts import check_given
    from offloadprobe.core.options import BY_NAME

    params = [p for p in getattr(command, "params", []) if p.name in BY_NAME]
    given = [p.name for p in params if _from_command_line(ctx, p.name)]
    check_given(ctx.params, given, only=[p.name for p in params])


def _from_command_line(ctx: Any, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", "") == "COMMANDLINE"
