"""The engine's own readings after an offload, in one sentence (``ResidencyFact.
engine_readings``): FSDP2's shards and moments, where they are, how many are pinned and
uneven, and the pinned bytes the caching host allocator owns over those the offload asked
page-locked memory for (its rounding). Rendered from the last cycle's fact, as read."""

from __future__ import annotations

from offloadprobe.core.records import RunRecord
from offloadprobe.core.units import format_bytes


def engine_reading_lines(run: RunRecord) -> list[str]:
    """One sentence for the last cycle's engine readings; none where there are none."""
    facts = [f for f in run.residency if f.engine_readings]
    if not facts:
        return []
    last = facts[-1]
    r = last.engine_readings
    text = (
        f"after offload (cycle {last.cycle}): {r.get('shards', 0)} shards and moments, "
        f"{r.get('shards_on_host', 0)} on the host ({r.get('shards_pinned', 0)} pinned), "
        f"{r.get('shards_on_device', 0)} on the device; {r.get('shards_uneven', 0)} "
        "uneven (padded)"
    )
    if r.get("grads_on_host"):
        text += (
            f"; {r['grads_on_host']} gradients moved with them ({r.get('grads_pinned', 0)} pinned)"
        )
    owned, asked = r.get("pinned_owned_bytes"), r.get("pinned_requested_bytes", 0)
    if owned is not None:
        rounding = f" = {owned / asked:.2f}x the {format_bytes(asked)} asked" if asked else ""
        text += f"; pinned owned {format_bytes(owned)}{rounding}"
    return [text]


__all__ = ["engine_reading_lines"]
