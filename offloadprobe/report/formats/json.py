"""``json``: the record itself, as the verb's ``--json`` wrote it."""

from __future__ import annotations

import json
from typing import TextIO

from offloadprobe.report.documents import Document


class JsonReporter:
    name = "json"
    summary = "the whole record as JSON (what --json writes)"
    kinds = frozenset({"run", "compare", "plan", "probe plan", "shard plan", "repro", "attach"})

    def render(self, document: Document, out: TextIO) -> None:
        out.write(json.dumps(document.data, indent=2) + "\n")


REPORTER = JsonReporter()
