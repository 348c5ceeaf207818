"""``markdown``: one table per result, ready for a pull request or a CI job summary."""

from __future__ import annotations

from typing import TextIO

from offloadprobe.report.documents import Document


class MarkdownReporter:
    name = "markdown"
    summary = "Markdown tables (a pull request, $GITHUB_STEP_SUMMARY)"
    kinds = frozenset({"run", "compare", "plan", "probe plan", "shard plan", "repro", "attach"})

    def render(self, document: Document, out: TextIO) -> None:
        from offloadprobe.report import markdown

        out.write(markdown.render(document))


REPORTER = MarkdownReporter()
