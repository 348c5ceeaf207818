"""Rich output of ``offloadprobe plan``, rendered from its records only.

Each strategy kind gets a verdict table (figure vs limit, one-line verdict) and a per-rank
table with the figures behind it; each fits 80 columns.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from offloadprobe.core.units import format_bytes
from offloadprobe.layout.terms import Term
from offloadprobe.plan.measured import MeasuredRow
from offloadprobe.plan.projection import RankHost
from offloadprobe.plan.scenario_plan import ScenarioPlan, StrategyPlan
from offloadprobe.report.tables import Column, Left, column_table
from offloadprobe.report.terms import terms_table


def verdict(row: StrategyPlan) -> str:
    """``OOM``/``ok``, and whether that is what the scenario expects."""
    text = "OOM" if row.outcome == "oom" else "ok"
    if row.expected is None:
        return text
    if row.expected == row.outcome:
        return f"{text} (as expected)"
    return f"{text}, EXPECTED {row.expected.upper() if row.expected == 'oom' else row.expected}"


def _vs(value: int | None, limit: int | None) -> str:
    if value is None:
        return "n/a"
    if limit is None:
        return format_bytes(value)
    return f"{format_bytes(value)} {'>' if value > limit else '<='} {format_bytes(limit)}"


def _rank(name: str) -> Column[StrategyPlan]:
    return Column(name.replace(" after offload", ""), lambda r: format_bytes(r.per_rank[name]))


STRATEGY: Column[StrategyPlan] = Left("strategy", lambda r: r.strategy)
VERDICT: Column[StrategyPlan] = Left("verdict", verdict)

PARAMS_VERDICT = [
    STRATEGY,
    Column("host/node vs limit", lambda r: _vs(r.host_per_node, r.host_limit)),
    VERDICT,
]
PARAMS_PER_RANK = [
    STRATEGY,
    *(_rank(k) for k in ("host peak", "steady host", "pinned", "optimizer on host")),
]
OPTIMIZER_VERDICT = [
    STRATEGY,
    Column("GPU/device vs limit", lambda r: _vs(r.gpu_per_device, r.gpu_limit)),
    Column("host/node vs limit", lambda r: _vs(r.host_per_node, r.host_limit)),
    VERDICT,
]
OPTIMIZER_PER_RANK = [
    STRATEGY,
    *(_rank(k) for k in ("GPU left after offload", "optimizer on host")),
]

STAGE_COLUMNS: list[Column[dict[str, int]]] = [
    Column("stage", lambda st: str(st["pp_rank"])),
    Column("layers", lambda st: str(st["layers"])),
    Column("param_data", lambda st: format_bytes(st["param_bytes"])),
    Column("grad_data", lambda st: format_bytes(st["grad_bytes"])),
]


def _of(plan: ScenarioPlan, kind: str) -> list[StrategyPlan]:
    return [r for r in plan.strategies if r.kind == kind]


TERMS_HINT = (
    "per-rank figures, DDP buffers by pipeline stage and the arithmetic of every figure: "
    "add --terms"
)


def scenario_name(path: str) -> str:
    """A packaged scenario by its name, any other file by its path as given."""
    from pathlib import Path

    from offloadprobe.scenarios.catalog import packaged

    given = Path(path)
    files = packaged()
    if files and given.parent == files[0].parent:
        return f"{given.stem} (packaged)"
    return path


def render_plan(plan: ScenarioPlan, console: Console, *, terms: bool = True) -> None:
    """The verdict tables and the notes; with ``terms``, then the per-rank figures, the
    buffers by stage and every strategy's arithmetic (a screen's worth without them)."""
    par = ", ".join(f"{k}={v}" for k, v in plan.parallelism.items())
    console.print(
        Text(
            f"scenario {scenario_name(plan.path)}: {plan.model}; {par}; {plan.cycles} cycles",
            style="bold",
        )
    )
    params = _of(plan, "params")
    console.print(column_table(PARAMS_VERDICT, params, title="model strategies: host per node"))
    optimizer = _of(plan, "optimizer")
    if optimizer:
        console.print(
            column_table(OPTIMIZER_VERDICT, optimizer, title="optimizer strategies: worst device")
        )
    if terms:
        console.print(
            column_table(
                PARAMS_PER_RANK,
                params,
                title="model strategies per rank (the worst node's largest)",
            )
        )
        if optimizer:
            console.print(
                column_table(OPTIMIZER_PER_RANK, optimizer, title="optimizer strategies per rank")
            )
        console.print(
            column_table(
                STAGE_COLUMNS, plan.stages, title="DDP buffers per rank, by pipeline stage"
            )
        )
        console.print(terms_table("buffers of the largest stage", plan.layout_terms))
        for row in plan.strategies:
            if row.terms:
                console.print(terms_table(f"{row.strategy} ({row.kind})", row.terms))
    for note in plan.notes:
        console.print(Text(note))
    if not terms:
        console.print(Text(TERMS_HINT, style="dim"))


PROBE_COLUMNS: list[Column[RankHost]] = [
    Left("strategy", lambda r: r.strategy),
    Column("host peak", lambda r: format_bytes(r.peak)),
    Column("steady host", lambda r: format_bytes(r.steady)),
    Column("pinned", lambda r: format_bytes(r.pinned)),
]


def probe_title(plan: Any) -> str:
    """``plan --probe``'s heading, from its record."""
    m = plan.model
    where = "CPU emulation" if plan.device == "cpu" else "CUDA"
    layers = f"{m.num_layers} layer{'s' if m.num_layers != 1 else ''}"
    cycles = f"{plan.cycles} cycle{'s' if plan.cycles != 1 else ''}"
    return (
        f"probe model: {layers}, hidden {m.hidden_size}, vocab {m.vocab_size}; "
        f"payload {format_bytes(plan.payload_bytes)}; {where}, {cycles}; host "
        "figures over the host RSS before the first offload"
    )


def render_probe_plan(plan: Any, console: Console, *, terms: bool = False) -> None:
    """``plan --probe``: projected host figures of each strategy on the probe model, and
    those measured of each ``--strategy`` in its one run there."""
    measured = list(getattr(plan, "measured", ()))
    if not measured:
        render_probe(list(plan.strategies), console, title=probe_title(plan), terms=terms)
        return
    render_measured(list(plan.strategies), measured, console, title=probe_title(plan), terms=terms)


def _bytes(value: int | None) -> str:
    return format_bytes(value) if value is not None else "n/a"


def _figures(row: RankHost | MeasuredRow) -> str:
    if not isinstance(row, MeasuredRow):
        return "projected"
    return "measured" if row.verdict.ok else f"measured: {row.verdict.kind}"


def _name(row: RankHost | MeasuredRow) -> str:
    """A row's name; an unnamed user spec with a space after its ``:`` and ``,``, so that a
    narrow console breaks it between its parts, never inside a module or function name."""
    return row.strategy.replace(":", ": ").replace(",", ", ")


MIXED_COLUMNS: list[Column[RankHost | MeasuredRow]] = [
    Left("strategy", _name),
    Left("figures", _figures),
    Column("host peak", lambda r: _bytes(r.peak)),
    Column("steady host", lambda r: _bytes(r.steady)),
    Column("pinned", lambda r: _bytes(r.pinned)),
]


def measured_note(row: MeasuredRow) -> str:
    """What a measured row is: one run, where, its verdict, and the size it holds for."""
    where = "in CPU emulation" if row.emulated else "on CUDA"
    # a pair's two functions apart, so that a narrow console breaks between, not inside, them
    spec = "" if row.spec == row.strategy else f" of {row.spec.replace(',', ', ')}"
    head = f"{row.strategy}: {row.figures}{spec}, {where}: {row.verdict.line()}."
    if row.peak is None:
        return f"{head} The run gave no figures."
    return (
        f"{head} Its figures hold for this probe's size only; no scaling to other sizes is claimed."
    )


def measured_terms(row: MeasuredRow) -> list[Term]:
    """The measured host events behind a row's figures, one phase after another."""
    terms = []
    for p in row.phases:
        at = f"cycle {p.cycle} {p.phase}"
        terms.append(Term(label=f"{at}: host at its start", formula="measured", value=p.host_start))
        terms.append(
            Term(label=f"{at}: peak over its start", formula="measured", value=p.peak_over_start)
        )
        terms.append(Term(label=f"{at}: host after", formula="measured", value=p.host_after))
    if row.peak is not None:
        terms.append(
            Term(label="host peak", formula="max of start + peak over start", value=row.peak)
        )
    if row.steady is not None:
        terms.append(
            Term(label="steady host", formula="host after the last offload", value=row.steady)
        )
    return terms


def render_measured(
    rows: list[RankHost],
    measured: list[MeasuredRow],
    console: Console,
    *,
    title: str,
    terms: bool = True,
) -> None:
    """Projected rows, then the measured ones, marked; a note on each measured row."""
    mixed: list[RankHost | MeasuredRow] = [*rows, *measured]
    console.print(Text(title, style="bold"))
    console.print(column_table(MIXED_COLUMNS, mixed, sections=lambda r: type(r).__name__))
    for row in measured:
        console.print(Text(measured_note(row)))
    if terms:
        for r in rows:
            if r.terms:
                console.print(terms_table(r.strategy, r.terms))
        for m in measured:
            if m.phases:
                console.print(terms_table(f"{m.strategy} (measured)", measured_terms(m)))


def render_probe(rows: list[RankHost], console: Console, *, title: str, terms: bool = True) -> None:
    """Projected host figures of each strategy on the probe model."""
    console.print(Text(title, style="bold"))
    console.print(column_table(PROBE_COLUMNS, rows))
    if terms:
        for r in rows:
            if r.terms:
                console.print(terms_table(r.strategy, r.terms))
