"""Shell scripts as a CI job or the Makefile runs them, ``offloadprobe`` being this process.

bash runs the script as it stands (``bash -e``, as a GitHub Actions ``run:`` step does).
``offloadprobe`` in it is a shell function that hands its arguments, its working folder
and its environment to this process, which runs the real entry point through
``invoke_cli`` (workers in this process, see ``tests/conftest.py``) and hands back both
streams and the exit code, which the function returns: ``set -e`` and ``$?`` see it as
they would see the console script's. A fresh interpreter per command would cost seconds
of CPU for what a test of the script does not need: process isolation.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHIM = r"""
offloadprobe() {
  _op_n=$(( ${_op_n:-0} + 1 ))
  local req="$OP_DIR/req.$_op_n"
  printf '%s\0' "$PWD" "$@" > "$req.args"
  env -0 > "$req.env"
  mv "$req.args" "$req"
  while [ ! -e "$OP_DIR/code.$_op_n" ]; do sleep 0.02; done
  cat "$OP_DIR/out.$_op_n"
  cat "$OP_DIR/err.$_op_n" >&2
  return "$(cat "$OP_DIR/code.$_op_n")"
}
"""


@dataclass
class ShellResult:
    """How the script ended, what it printed, and each ``offloadprobe`` call in it."""

    returncode: int
    stdout: str
    stderr: str
    calls: list[tuple[list[str], Any]] = field(default_factory=list)
    """``(argv, CliResult)`` per call, in order."""


def _split(data: bytes) -> list[str]:
    return [part.decode() for part in data.split(b"\0")[:-1]]


def _serve(folder: Path, n: int, columns: int) -> tuple[list[str], Any]:
    from tests.conftest import invoke_cli

    where, *argv = _split((folder / f"req.{n}").read_bytes())
    given = dict(
        p.split("=", 1) for p in _split((folder / f"req.{n}.env").read_bytes()) if "=" in p
    )
    env = {k: v for k, v in given.items() if os.environ.get(k) != v and k != "OP_DIR"}
    with contextlib.chdir(where):
        result = invoke_cli(*argv, env=env, columns=columns)
    (folder / f"out.{n}").write_text(result.stdout)
    (folder / f"err.{n}").write_text(result.stderr)
    (folder / f"code.{n}.tmp").write_text(str(result.exit_code))
    (folder / f"code.{n}.tmp").rename(folder / f"code.{n}")
    return argv, result


def run_script(
    script: str, *, cwd: Path, env: dict[str, str], columns: int = 80, timeout: float = 600
) -> ShellResult:
    """Run ``script`` under ``bash -e`` in ``cwd`` with ``env`` added to this process's."""
    with tempfile.TemporaryDirectory(prefix="offloadprobe-shell-") as name:
        folder = Path(name)
        out, err = folder / "stdout", folder / "stderr"
        full = {**os.environ, **env, "OP_DIR": name, "COLUMNS": str(columns)}
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", SHIM + script], cwd=cwd, env=full, stdout=o, stderr=e
            )
        calls = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                if (folder / f"req.{len(calls) + 1}").exists():
                    calls.append(_serve(folder, len(calls) + 1, columns))
                elif proc.poll() is not None:
                    break
                elif time.monotonic() > deadline:
                    raise TimeoutError(f"the script ran past {timeout} s")
                else:
                    time.sleep(0.02)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return ShellResult(proc.returncode, out.read_text(), err.read_text(), calls)
