"""The ``offloadprobe`` command line. One module per verb; errors become exit codes here."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from offloadprobe.core import collector
from offloadprobe.core.errors import OffloadProbeError

app = typer.Typer(
    name="offloadprobe",
    help="Measure, compare and reproduce host/pinned/GPU memory of offload strategies "
    "on real megatron-core buffers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from offloadprobe import __version__

        print(f"offloadprobe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Measure, compare and reproduce offload memory on real megatron-core buffers."""


VERBS = {
    "run": "run",
    "compare": "compare",
    "plan": "plan",
    "repro": "repro",
    "scenarios": "scenarios",
    "alloc-conf": "alloc_conf",
    "attach": "attach",
}
"""Each verb and the module that registers it (one module per verb)."""


def _register(args: list[str] | None = None) -> None:
    """Import the verbs' modules (each registers its command). Only the one asked for when
    ``args`` names a verb: a child run imports neither compare's nor plan's reporting."""
    import importlib

    wanted = [VERBS[args[0]]] if args and args[0] in VERBS else VERBS.values()
    for module in wanted:
        importlib.import_module(f"offloadprobe.cli.{module}")


_BUILT: dict[tuple[str, ...], Any] = {}
"""The click command built for each set of registered verbs (typer builds it from the
functions' signatures, tens of milliseconds; a process that calls ``main`` again reuses it)."""


def _command() -> Any:
    verbs = tuple(sorted(info.name or "" for info in app.registered_commands))
    built = _BUILT.get(verbs)
    if built is None:
        built = _BUILT[verbs] = typer.main.get_command(app)
        _plain_flags(built)
    return built


def _plain_flags(command) -> None:
    """A flag takes no value, so its help shows no type: typer prints ``<bool>`` otherwise."""
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    make_help = command.get_help_option

    def help_option(ctx, make=make_help):
        option = make(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _plain_flags(sub)


def fail(message: str, code: int, kind: str = "bad input") -> None:
    """Print one line to stderr, leave it for a parent as data, and exit."""
    print(f"offloadprobe: error: {message}", file=sys.stderr)
    _tell_parent(kind, message)
    raise SystemExit(code)


def _tell_parent(kind: str, message: str) -> None:
    """A child run (see ``isolation.child``) writes its failure where its parent asked."""
    from offloadprobe.core.errors import ERROR_FILE_ENV
    from offloadprobe.core.world import rank_file

    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        with contextlib.suppress(OSError):
            rank_file(Path(path)).write_text(json.dumps({"kind": kind, "message": message}))


THIRD_PARTY = ("megatron", "transformer_engine", "apex", "torch.distributed")
"""Packages whose import-time and construction-time chatter is not offloadprobe's output:
megatron-core's deprecation banners (``GPTModel IS DEPRECATED``, logged by
``megatron.core`` loggers) and optional-backend warnings (Transformer Engine, Apex,
``warnings.warn`` in their modules). Our own notes say what was emulated or missing."""


def _quiet_third_party_warnings() -> None:
    """Silence warnings raised in, and log records below ERROR from, ``THIRD_PARTY``."""
    import logging
    import warnings

    for package in THIRD_PARTY:
        warnings.filterwarnings("ignore", module=package.replace(".", r"\.") + r"(\.|$)")
        logging.getLogger(package).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and exit 2 for bad input, never a traceback.

    Click's exceptions are matched by shape, not type: typer releases differ in
    whether they vendor click.
    """
    _quiet_third_party_warnings()
    args = sys.argv[1:] if argv is None else list(argv)
    _register(args)
    command = _command()
    if not args:
        args = ["--help"]
    if argv is None:  # the process's own entry point: see core/collector.py
        collector.pause_for_imports()
    try:
        code = command.main(args=args, prog_name="offloadprobe", standalone_mode=False)
    except OffloadProbeError as exc:
        fail(str(exc), exc.exit_code, exc.kind)
    except Exception as exc:
        kind = type(exc).__name__
        if kind == "Exit":
            raise SystemExit(getattr(exc, "exit_code", 0)) from None
        if kind == "Abort":
            fail("aborted", 130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            fail(exc.format_message().replace("\n", " ") + hint, exc.exit_code)
        _tell_parent("crashed", f"{kind}: {exc}")
        raise
    finally:
        collector.end_pause()  # a command that started no real work (plan, scenarios)
    raise SystemExit(code if isinstance(code, int) else 0)
