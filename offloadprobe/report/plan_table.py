"""Rich output of ``offloadprobe plan``, rendered from its records only."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offloadprobe.core.units import format_bytes
from offloadprobe.plan.projection import RankHost
from offloadprobe.plan.scenario_plan import ScenarioPlan, StrategyPlan
from offloadprobe.report.terms import terms_table


def _verdict(row: StrategyPlan) -> str:
    text = "OOM" if row.outcome == "oom" else "ok"
    if row.expected is None:
        return text
    return text + (
        " (as expected)" if row.expected == row.outcome else f" (EXPECTED {row.expected})"
    )


def _vs(value: int | None, limit: int | None) -> str:
    if value is None:
        return "n/a"
    if limit is None:
        return format_bytes(value)
    return f"{format_bytes(value)} {'>' if value > limit else '<='} {format_bytes(limit)}"


def params_table(plan: ScenarioPlan) -> Table:
    table = Table(
        title="model strategies (per rank: the worst node's largest rank)", title_justify="left"
    )
    for name in (
        "strategy",
        "host peak/rank",
        "steady/rank",
        "pinned/rank",
        "optimizer/rank",
        "host/node vs limit",
        "verdict",
    ):
        table.add_column(name, justify="left" if name in ("strategy", "verdict") else "right")
    for row in plan.strategies:
        if row.kind != "params":
            continue
        r = row.per_rank
        table.add_row(
            row.strategy,
            format_bytes(r["host peak"]),
            format_bytes(r["steady host"]),
            format_bytes(r["pinned"]),
            format_bytes(r["optimizer on host"]),
            _vs(row.host_per_node, row.host_limit),
            _verdict(row),
        )
    return table


def optimizer_table(plan: ScenarioPlan) -> Table:
    table = Table(title="optimizer strategies (per device: the worst rank)", title_justify="left")
    for name in (
        "strategy",
        "GPU left after offload",
        "GPU/device vs limit",
        "optimizer/rank on host",
        "host/node vs limit",
        "verdict",
    ):
        table.add_column(name, justify="left" if name in ("strategy", "verdict") else "right")
    for row in plan.strategies:
        if row.kind != "optimizer":
            continue
        table.add_row(
            row.strategy,
            format_bytes(row.per_rank["GPU left after offload"]),
            _vs(row.gpu_per_device, row.gpu_limit),
            format_bytes(row.per_rank["optimizer on host"]),
            _vs(row.host_per_node, row.host_limit),
            _verdict(row),
        )
    return table


def render_plan(plan: ScenarioPlan, console: Console, *, terms: bool = True) -> None:
    """Summary tables first, then every strategy's terms."""
    par = ", ".join(f"{k}={v}" for k, v in plan.parallelism.items())
    console.print(
        f"scenario {escape(plan.path)}: {escape(plan.model)}; {par}; {plan.cycles} cycles"
    )
    stages = Table(title="per-rank DDP buffers by pipeline stage", title_justify="left")
    for name in ("stage", "layers", "param_data", "grad_data"):
        stages.add_column(name, justify="right")
    for st in plan.stages:
        stages.add_row(
            str(st["pp_rank"]),
            str(st["layers"]),
            format_bytes(st["param_bytes"]),
            format_bytes(st["grad_bytes"]),
        )
    console.print(stages)
    console.print(params_table(plan))
    if any(r.kind == "optimizer" for r in plan.strategies):
        console.print(optimizer_table(plan))
    if terms:
        console.print(terms_table("buffers of the largest stage", plan.layout_terms))
        for row in plan.strategies:
            console.print(terms_table(f"{row.strategy} ({row.kind})", row.terms))
    for note in plan.notes:
        console.print(escape(note))


def render_probe(rows: list[RankHost], console: Console, *, title: str, terms: bool = True) -> None:
    """Projected host figures of each strategy on the probe model."""
    table = Table(title=escape(title), title_justify="left")
    for name in ("strategy", "host peak", "steady host", "pinned"):
        table.add_column(name, justify="left" if name == "strategy" else "right")
    for r in rows:
        table.add_row(
            r.strategy, format_bytes(r.peak), format_bytes(r.steady), format_bytes(r.pinned)
        )
    console.print(table)
    if terms:
        for r in rows:
            console.print(terms_table(r.strategy, r.terms))
