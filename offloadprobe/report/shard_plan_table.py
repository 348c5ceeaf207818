"""``plan --engine fsdp2``'s table: one row per rank, then the node, from the record."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from offloadprobe.core.units import format_bytes
from offloadprobe.plan.shard_plan import ShardPlan, ShardRank
from offloadprobe.report.tables import Column, column_table


def _x(nbytes: int, of: int) -> str:
    return f"{nbytes / of:.2f}x {format_bytes(nbytes)}" if of else format_bytes(nbytes)


COLUMNS: list[Column[ShardRank]] = [
    Column("rank", lambda r: str(r.rank)),
    Column("uneven", lambda r: f"{r.uneven}/{r.tensors}"),
    Column("padding", lambda r: format_bytes(r.padding_bytes)),
    Column("moves", lambda r: format_bytes(r.moved_bytes)),
    Column("verl FSDP2 pinned", lambda r: _x(r.verl_pinned_bytes, r.moved_bytes)),
    Column("exact (no grads)", lambda r: _x(r.exact_host_bytes, r.moved_bytes)),
]


def render_shard_plan(plan: ShardPlan, console: Console) -> None:
    title = (
        f"FSDP2 {plan.preset}, {plan.blocks} blocks over {plan.shards} shards: "
        "verl FSDP2's pinned host memory per rank, held through training"
    )
    caption = (
        "uneven = shards whose dim 0 falls short of the chunk (padded; verl's model.to "
        "leaves them pageable); x = multiple of what the rank's offload moves"
    )
    console.print(column_table(COLUMNS, plan.ranks, title=title, caption=caption))
    if plan.node_ranks > 1:
        moved, pinned = plan.node_moved_bytes, plan.node_pinned_bytes
        console.print(
            Text(
                f"node of {plan.node_ranks} ranks: verl FSDP2 pins {format_bytes(pinned)} "
                f"for the {format_bytes(moved)} its offloads move ({pinned / moved:.2f}x)"
            )
        )
    for note in plan.notes:
        console.print(Text(note))
