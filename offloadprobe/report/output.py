"""Output files (``--json``, ``--markdown``, traces): checked before the work, written after.

Every command validates each output path before it builds or runs anything, so an
unwritable path costs nothing but one line and exit 2. Missing parent folders are created.
Each file written is named on stderr (``wrote JSON report.json``), stdout being the report.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError


def check_writable(path: Path | None, flag: str) -> Path | None:
    """Create ``path``'s folder and prove a file can be written there; None passes through."""
    if path is None:
        return None
    if path.is_dir():
        raise UsageError(f"cannot write {flag} {path}: it is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".offloadprobe-", delete=True):
            pass
        if path.exists():
            with path.open("a"):
                pass
    except OSError as exc:
        raise UsageError(
            f"cannot write {flag} {path}: {exc.strerror or exc}; choose a writable path"
        ) from None
    return path


WHAT = {"--json": "JSON", "--markdown": "Markdown", "--trace": "trace", "--plot": "plot"}
"""What each output flag writes, in the line that says where it went."""


def announce(path: Path, flag: str, note: str = "") -> None:
    """One line on stderr: which file a flag's output went to (``wrote plot p.png``)."""
    print(f"wrote {WHAT.get(flag, flag)} {path}{note}", file=sys.stderr, flush=True)


def write_text(text: str, path: Path, flag: str) -> None:
    """Write ``text`` to a path :func:`check_writable` accepted, and say where."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {flag} {path}: {exc.strerror or exc}") from None
    announce(path, flag)


def write_json(doc: dict[str, Any], path: Path, flag: str = "--json") -> None:
    """The one JSON writer: every command's records go through here."""
    write_text(json.dumps(doc, indent=2) + "\n", path, flag)
