"""The ``offloadprobe`` command line. One module per verb; errors become exit codes here."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import typer

from offloadprobe.core.errors import OffloadProbeError

app = typer.Typer(
    name="offloadprobe",
    help="Measure, compare and reproduce host/pinned/GPU memory of offload strategies "
    "on real megatron-core buffers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Measure, compare and reproduce offload memory on real megatron-core buffers."""


def _register() -> None:
    from offloadprobe.cli import compare, plan, repro, run  # noqa: F401  (each verb registers)


def fail(message: str, code: int, kind: str = "bad input") -> None:
    """Print one line to stderr, leave it for a parent as data, and exit."""
    print(f"offloadprobe: error: {message}", file=sys.stderr)
    _tell_parent(kind, message)
    raise SystemExit(code)


def _tell_parent(kind: str, message: str) -> None:
    """A child run (see ``isolation.child``) writes its failure where its parent asked."""
    from offloadprobe.isolation.child import ERROR_FILE_ENV

    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(json.dumps({"kind": kind, "message": message}))


def _quiet_third_party_warnings() -> None:
    """megatron-core and torch.distributed warn about optional backends on every import;
    that is not offloadprobe's output. Our own notes say what was emulated or missing."""
    import warnings

    for module in (r"megatron\.", r"torch\.distributed"):
        warnings.filterwarnings("ignore", module=module)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and exit 2 for bad input, never a traceback.

    Click's exceptions are matched by shape, not type: typer releases differ in
    whether they vendor click.
    """
    _quiet_third_party_warnings()
    _register()
    args = sys.argv[1:] if argv is None else list(argv)
    command = typer.main.get_command(app)
    if not args:
        args = ["--help"]
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
    raise SystemExit(code if isinstance(code, int) else 0)
