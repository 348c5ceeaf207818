"""Rank and node rows of a run over several ranks (rendered from ``RunRecord.world``).

One row per rank (its own figures, over its own baseline), then per node the ranks'
minimum, mean, maximum and sum of each figure, and the node's measured peak: its memory
cgroup's high-water mark over the node's usage before the first offload. The sum is what
the node would need if every rank peaked at the same moment; the measured row says
whether they did.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType

from offloadprobe.core.records import NodeRecord, RunRecord, Spread, WorldRun
from offloadprobe.core.units import format_bytes
from offloadprobe.report.tables import NOT_MEASURED, Column, Left, column_table


@dataclass(frozen=True, slots=True)
class _Row:
    who: str
    host_peak: float | None
    steady: float | None
    gpu_left: float | None
    offload: float | None
    load: float | None
    section: int


def _size(value: float | None) -> str:
    return NOT_MEASURED if value is None else format_bytes(int(value))


def _rate(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f}"


COLUMNS: list[Column[_Row]] = [
    Left("rank / node", lambda r: r.who),
    Column("host peak", lambda r: _size(r.host_peak)),
    Column("steady host", lambda r: _size(r.steady)),
    Column("GPU left", lambda r: _size(r.gpu_left)),
    Column("offload GB/s", lambda r: _rate(r.offload)),
    Column("load GB/s", lambda r: _rate(r.load)),
]


def _rank_row(run: RunRecord, section: int) -> _Row:
    s = run.summary
    place = run.place
    who = f"rank {place.rank} (node {place.node_rank})" if place else "rank ?"
    if s is None:
        return _Row(f"{who}: no summary", None, None, None, None, None, section)
    return _Row(
        who,
        s.host_peak_bytes,
        s.steady_host_bytes,
        s.gpu_left_after_offload_bytes,
        s.offload_gbps,
        s.load_gbps,
        section,
    )


def _stat(node: NodeRecord, name: str, stat: str) -> float | None:
    found: Spread | None = node.figures.get(name)
    return None if found is None else getattr(found, stat)


def _node_rows(node: NodeRecord, section: int) -> list[_Row]:
    rows = []
    names = ("host_peak_bytes", "steady_host_bytes", "gpu_left_after_offload_bytes")
    for stat in ("min", "mean", "max", "sum"):
        values = [_stat(node, n, stat) for n in names]
        rates = [_stat(node, n, stat) for n in ("offload_gbps", "load_gbps")]
        rows.append(_Row(f"node {node.node_rank}: {stat}", *values, *rates, section))
    measured = f"node {node.node_rank}: measured"
    rows.append(_Row(measured, node.peak_bytes, node.steady_bytes, None, None, None, section))
    return rows


def world_table(world: WorldRun) -> RenderableType:
    """Every rank's row, then each node's spread, sum and measured peak."""
    rows = [_rank_row(r, 0) for r in world.ranks]
    for index, node in enumerate(world.nodes, start=1):
        rows += _node_rows(node, index)
    layout = " ".join(f"{k} {v}" for k, v in world.layout.items() if v is not None)
    return column_table(
        COLUMNS,
        rows,
        title=f"{world.world_size} ranks on {world.nnodes} node(s): {layout}",
        caption=_caption(world),
        sections=lambda r: r.section,
    )


def _caption(world: WorldRun) -> str:
    lines = [
        "host figures over each rank's (node's) RSS before the first offload; "
        "sum = every rank peaking at once; measured = the node memory cgroup's peak"
    ]
    for node in world.nodes:
        if node.peak_bytes is None:
            why = node.cgroup_missing or "no node cgroup"
            lines.append(f"node {node.node_rank}: no measured peak ({why})")
        elif node.rank_peak_sum_bytes:
            share = node.peak_bytes / node.rank_peak_sum_bytes
            lines.append(
                f"node {node.node_rank}: measured peak {format_bytes(node.peak_bytes)} = "
                f"{share:.2f} of the sum of its ranks' peaks ({node.cgroup})"
            )
    return "\n".join(lines + world.notes)


@dataclass(frozen=True, slots=True)
class _NodeRow:
    label: str
    node: NodeRecord


def _x(value: int | None, moved: float | None) -> str:
    if value is None:
        return NOT_MEASURED
    if not moved:
        return format_bytes(value)
    return f"{value / moved:.2f}x {format_bytes(value)}"


def _per_rank_moved(n: NodeRecord) -> float | None:
    moved = n.figures.get("moved_bytes")
    return moved.mean if moved else None


def _node_moved(n: NodeRecord) -> float | None:
    moved = n.figures.get("moved_bytes")
    return moved.sum if moved else None


NODE_COLUMNS: list[Column[_NodeRow]] = [
    Left("strategy / node", lambda r: f"{r.label} / {r.node.node_rank}"),
    Column(
        "rank max", lambda r: _x(_int(r.node, "host_peak_bytes", "max"), _per_rank_moved(r.node))
    ),
    Column("ranks' sum", lambda r: _x(r.node.rank_peak_sum_bytes, _node_moved(r.node))),
    Column("node measured", lambda r: _x(r.node.peak_bytes, _node_moved(r.node))),
]


def _int(node: NodeRecord, name: str, stat: str) -> int | None:
    value = _stat(node, name, stat)
    return None if value is None else int(value)


def compare_nodes_table(rows: list[tuple[str, RunRecord | None]]) -> RenderableType | None:
    """One row per compared strategy and node: the largest rank peak, the sum of the
    ranks' peaks and the node cgroup's measured peak, each also as a multiple of what the
    rank (node) moves. None when no row ran over several ranks."""
    found = [
        _NodeRow(label, node)
        for label, run in rows
        if run is not None and run.world is not None
        for node in run.world.nodes
    ]
    if not found:
        return None
    return column_table(
        NODE_COLUMNS,
        found,
        title="host peak per node",
        caption="x = over the bytes one rank (rank max) or the node's ranks together move; "
        "measured = the node memory cgroup's peak over its usage before the first offload",
    )
