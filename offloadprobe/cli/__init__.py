"""The ``offloadprobe`` command line. One module per verb; errors become exit codes here."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from offloadprobe.core import collector
from offloadprobe.core.chatter import quiet_third_party
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
    "strategies": "strategy_verb",
    "alloc-conf": "alloc_conf",
    "show": "show",
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
        from offloadprobe.cli import given

        built = _BUILT[verbs] = typer.main.get_command(app)
        _plain_flags(built)
        given.install(built)  # no flag twice, none that another cancels
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


def fail(message: str, code: int) -> None:
    """Print one line to stderr and exit."""
    print(f"offloadprobe: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _interrupted(signum: int) -> None:
    """One verdict line for a parent stopped by a signal; every worker is gone by now."""
    import signal

    from offloadprobe.isolation.signals import stop_all

    stop_all()
    name = signal.Signals(signum).name
    print(
        f"offloadprobe: interrupted: {name} (signal {signum}); every measured process it "
        "started was stopped and its files removed",
        file=sys.stderr,
    )
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and exit 2 for bad input, never a traceback.

    Click's exceptions are matched by shape, not type: typer releases differ in
    whether they vendor click.
    """
    quiet_third_party()
    args = sys.argv[1:] if argv is None else list(argv)
    _register(args)
    command = _command()
    if not args:
        args = ["--help"]
    if argv is None:  # the process's own entry point: see core/collector.py
        collector.pause_for_imports()
    from offloadprobe.isolation.signals import Interrupted

    try:
        code = command.main(args=args, prog_name="offloadprobe", standalone_mode=False)
    except Interrupted as exc:
        _interrupted(exc.signum)
    except OffloadProbeError as exc:
        fail(str(exc), exc.exit_code)
    except ModuleNotFoundError as exc:  # torch or megatron-core, on a path not guarded
        from offloadprobe.core.extras import from_import_error

        lacking = from_import_error(exc, " ".join(["offloadprobe", *args[:1]]))
        if lacking is None:
            raise
        fail(str(lacking), lacking.exit_code)
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
        raise
    finally:
        collector.end_pause()  # a command that started no real work (plan, scenarios)
    raise SystemExit(code if isinstance(code, int) else 0)
