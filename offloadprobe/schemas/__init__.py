"""The JSON Schema (draft 2020-12) of every verb's ``--json`` document, shipped with the
package: ``run``, ``compare``, ``plan``, ``probe-plan`` (``plan --probe``), ``repro``,
``attach``, ``alloc-conf`` and ``pytest`` (the plugin's ``--offloadprobe-save`` file).

Every document carries ``schema_version`` (``core.records.SCHEMA_VERSION``); each schema
requires every key of its version with its type, and allows keys a later one adds. The
files are made from the typed records by ``tools/schemas.py``. To check a file in CI::

    python -c "import json, sys; from offloadprobe.schemas import validate; \\
        validate(json.load(open(sys.argv[1])))" compare.json

(``validate`` needs the ``jsonschema`` package, ``pip install jsonschema``.)
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from offloadprobe.core.errors import UsageError

NAMES = (
    "run",
    "compare",
    "plan",
    "probe-plan",
    "shard-plan",
    "repro",
    "attach",
    "alloc-conf",
    "pytest",
)
KINDS = {"probe plan": "probe-plan", "shard plan": "shard-plan"}
"""A document's ``kind`` where its schema's name differs."""


@cache
def load(name: str) -> dict[str, Any]:
    """The schema of the documents named ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise UsageError(f"no JSON Schema {name!r}: give one of {', '.join(NAMES)}")
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text()
    return dict(json.loads(text))


def name_of(doc: dict[str, Any]) -> str:
    """Which schema a document is held to: its ``kind``; attach's by its keys."""
    kind = doc.get("kind")
    if isinstance(kind, str) and KINDS.get(kind, kind) in NAMES:
        return KINDS.get(kind, kind)
    if "job_exit_code" in doc and "calls" in doc:
        return "attach"
    raise UsageError("not an offloadprobe document: no kind this package has a schema for")


def validate(doc: dict[str, Any], name: str | None = None) -> None:
    """Raise ``jsonschema.ValidationError`` where ``doc`` breaks its schema (``name``, or
    the one :func:`name_of` picks)."""
    import jsonschema

    schema = load(name or name_of(doc))
    jsonschema.Draft202012Validator(schema, format_checker=None).validate(doc)
