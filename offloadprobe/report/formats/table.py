"""``table``: the rich tables every verb prints, colourless and wrapped where it is piped."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

from offloadprobe.report.documents import Document


class TableReporter:
    name = "table"
    summary = "the tables each verb prints (what a terminal or a CI log shows)"
    kinds = frozenset({"run", "compare", "plan", "probe plan", "shard plan", "repro", "attach"})

    def render(self, document: Document, out: TextIO) -> None:
        console = Console(file=out)
        record = document.record
        if document.kind == "run":
            from offloadprobe.report.table import render_report

            render_report(record, console)
        elif document.kind == "compare":
            from offloadprobe.report.comparison_table import render_comparison

            render_comparison(record, console)
        elif document.kind == "plan":
            from offloadprobe.report.plan_table import render_plan

            render_plan(record, console, terms=document.printed.get("terms", False))
        elif document.kind == "probe plan":
            from offloadprobe.report.plan_table import render_probe_plan

            render_probe_plan(record, console, terms=document.printed.get("terms", False))
        elif document.kind == "shard plan":
            from offloadprobe.report.shard_plan_table import render_shard_plan

            render_shard_plan(record, console)
        elif document.kind == "attach":
            from offloadprobe.attach.report_table import render_attach

            render_attach(record, console)
        else:
            from offloadprobe.report.repro_table import render_repro

            render_repro(record, console)


REPORTER = TableReporter()
