"""``relock``: ``hugepin``'s pipeline with nothing held while training.

Every load copies each chunk back at link speed, then unregisters it
(``cudaHostUnregister``) and hands its pages back to the kernel (``MADV_DONTNEED``) as soon
as its copy has completed; the mapping stays (virtual only, with its huge-page advice).
Every offload touches, registers and copies again through the same chunk pipeline, so
each cycle pays the first offload's page-locking; the host holds the payload only from
an offload to the next load.

Memory handed back to the kernel can be handed on to a hypervisor (free page reporting
in a VM) and faults in slower when touched again: ``benchmarks/first_offload.py``
measures first touch of fresh, just-freed and idle-freed memory side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.hugepin_settings import check_options
from offloadprobe.layout.pinned import Alloc, Event, Free


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """Every offload page-locks an exact mapping per buffer; the load after it hands the
    pages back, so the previous cycle's are gone before the next offload."""
    events: list[Event] = []
    for c in range(cycles):
        if c:
            events += [Free(name=f"{name} host mapping, cycle {c - 1}") for name in labels]
        for name, n in zip(labels, payloads, strict=True):
            events.append(
                Alloc(name=f"{name} host mapping, cycle {c}", nbytes=n, kind="registered")
            )
    return events


STRATEGY = ModelStrategyInfo(
    name="relock",
    summary="hugepin, its pages handed back after each load",
    factory="offloadprobe.engine.hugepin_pipeline:relock",
    host_events=host_events,
    emulation="chunks are touched on threads but not page-locked; copies are host copies; "
    "pages are handed back after each load",
    check_options=check_options,
)
