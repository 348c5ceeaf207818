"""One registry of reporters: a reporter renders a saved result (``Document``) to text.

A reporter is one module exporting ``REPORTER``, an object with a ``name``, a one-line
``summary``, the document ``kinds`` it renders and ``render(document, out)``. Built-ins are
the modules of ``report/formats/`` that assign ``REPORTER``, registered by module path
(imported on first use); third parties add theirs under
the entry-point group ``offloadprobe.reporters``. Every verb prints through the ``table``
reporter, and ``offloadprobe show FILE --format NAME`` through any.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol, TextIO, runtime_checkable

from offloadprobe.core.errors import UsageError
from offloadprobe.core.registry import Registry
from offloadprobe.report.documents import Document


@runtime_checkable
class Reporter(Protocol):
    """Renders documents of its ``kinds`` (records only, nothing measured)."""

    name: str
    summary: str
    kinds: Collection[str]

    def render(self, document: Document, out: TextIO) -> None: ...


def _adapt(name: str, found: Any) -> Reporter:
    if not isinstance(found, Reporter):
        raise UsageError(f"reporter {name!r} has no name, summary, kinds and render(document, out)")
    return found


REPORTERS: Registry[Reporter] = Registry(
    "reporter", "offloadprobe.reporters", _adapt, attribute="REPORTER"
)
REPORTERS.register_package(
    "offloadprobe.report.formats",
    Path(__file__).parent / "formats",
    first=("table", "markdown", "json"),
)


def render(document: Document, out: TextIO, *, format: str = "table") -> None:
    """``document`` through the reporter named ``format``."""
    REPORTERS.check(format)
    reporter = REPORTERS.get(format)
    if document.kind not in reporter.kinds:
        kinds = ", ".join(sorted(reporter.kinds))
        raise UsageError(f"--format {format} renders {kinds} results, not a {document.kind}")
    reporter.render(document, out)
