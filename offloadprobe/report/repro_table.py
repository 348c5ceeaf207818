"""Rich output of ``offloadprobe repro``, rendered from its ``Repro`` record only."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offloadprobe.report.terms import terms_table
from offloadprobe.repro.records import Repro


def outcome_table(repro: Repro) -> Table:
    """One row per strategy: what the scenario expects, what the scaled run did."""
    table = Table(
        title=escape(f"{repro.scenario}: reproduced on {repro.device}"), title_justify="left"
    )
    for name in ("strategy", "expected", "observed", "result", "match"):
        table.add_column(name)
    for o in repro.outcomes:
        observed = o.observed if o.observed != "oom" else "OOM"
        table.add_row(
            escape(o.strategy),
            o.expected.upper() if o.expected == "oom" else o.expected,
            observed,
            escape(o.detail),
            "yes" if o.matches else "NO",
        )
    return table


def render_repro(repro: Repro, console: Console) -> None:
    """The scaling, every child's arithmetic, the outcomes, the method and notes."""
    console.print(f"scenario {escape(repro.path)}; probe model {repro.model}")
    console.print(escape(repro.scale))
    if repro.host_terms:
        console.print(terms_table("host limit, scaled to one process", repro.host_terms))
    if repro.gpu_terms:
        console.print(terms_table("GPU headroom, scaled to one process", repro.gpu_terms))
    for o in repro.outcomes:
        if o.terms:
            console.print(terms_table(f"{o.strategy}: {o.observed}", o.terms))
    console.print(outcome_table(repro))
    methods: dict[str, list[str]] = {}
    for o in repro.outcomes:
        methods.setdefault(o.method, []).append(o.strategy)
    for method, names in methods.items():
        console.print(f"method ({', '.join(names)}): {escape(method)}")
    for o in repro.outcomes:
        if o.observed == "error" and o.stderr_tail:
            console.print(f"{escape(o.strategy)} stderr: {escape(o.stderr_tail)}")
    for note in repro.notes:
        console.print(escape(note))
