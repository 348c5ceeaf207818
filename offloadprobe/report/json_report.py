"""The JSON report for CI: ``Report.to_dict()`` written to a path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import Report


def write_json(report: Report, path: Path) -> None:
    """Write the report; an unwritable path is the user's to fix."""
    write_document(report.to_dict(), path)


def write_document(doc: dict[str, Any], path: Path) -> None:
    """Write a JSON document to ``path``, creating its folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write --json {path}: {exc.strerror}") from None
