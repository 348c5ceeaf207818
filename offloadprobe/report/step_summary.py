"""GitHub Actions job summaries: where ``GITHUB_STEP_SUMMARY`` names a file, every verb
that judges rows (``run``, ``compare``, ``repro``, ``attach``) appends its Markdown there.

The runner renders that file on the job's summary page; each step gets its own, and
several commands in one step add up in order, so each report is headed by its verb.
Writing it never changes the exit code: a file that cannot be written costs one line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

VARIABLE = "GITHUB_STEP_SUMMARY"


def step_summary_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The job summary file this process should append to, or None outside a job."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    return Path(value) if value else None


def append_step_summary(verb: str, markdown: str, environ: Mapping[str, str] | None = None) -> None:
    """Append ``### offloadprobe VERB`` and ``markdown`` to the job summary, if there is one."""
    path = step_summary_path(environ)
    if path is None:
        return
    try:
        with path.open("a", encoding="utf-8") as out:
            out.write(f"### offloadprobe {verb}\n\n{markdown.rstrip()}\n\n")
    except OSError as exc:
        print(
            f"offloadprobe: warning: cannot append to ${VARIABLE} {path}: {exc.strerror or exc}",
            file=sys.stderr,
        )
