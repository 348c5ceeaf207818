"""Command-line flags derived from the one option model (``core.options``).

``with_options(verb, extra)`` wraps a verb's function so that Typer sees one keyword
parameter per option of that verb (its flag, help and default from the model) plus the
verb's own ``extra`` parameters; the function receives them all in one dict.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from offloadprobe.core.options import Option, for_verb


def _annotation(option: Option) -> Any:
    kind: Any = option.type
    if option.repeatable:
        kind = list[str] | None
    elif option.default is None and option.type is not bool:
        kind = option.type | None
    if option.type is bool and not option.repeatable:
        flags = f"{option.cli_flag}/{option.negative_flag}"
        info = typer.Option(flags, help=option.help, rich_help_panel=None)
    else:
        info = typer.Option(option.cli_flag, help=option.help)
    return Annotated[kind, info]


def parameter(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> Any:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def with_options(
    verb: str, extra: Sequence[inspect.Parameter] = (), *, skip: Sequence[str] = ()
) -> Callable[[Callable[[dict[str, Any]], None]], Callable[..., None]]:
    """Decorate ``fn(values)`` into a Typer command over the verb's options and ``extra``."""

    def decorate(fn: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
        params = list(extra)
        for option in for_verb(verb):
            if option.name in skip:
                continue
            default = None if option.repeatable else option.default
            params.append(parameter(option.name, _annotation(option), default))
        params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

        def command(**values: Any) -> None:
            fn(values)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.__doc__ = fn.__doc__
        command.__name__ = fn.__name__
        command.__module__ = fn.__module__
        return command

    return decorate
