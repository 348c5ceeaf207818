"""``hugepin``: exact host mappings page-locked at the ceiling, chunk by chunk, while the
earlier chunks already copy; kept and reused every cycle.

Each DDP buffer gets one exact-size mapping with huge-page advice (4 KiB pages where the
kernel refuses, and the run's notes say so), first-touched on a thread pool sized to the
free cores, registered with ``cudaHostRegister`` chunk by chunk on one thread, and each
chunk's device-to-host copy issued as soon as that chunk is registered. The pipeline is
``engine/hugepin_pipeline.py``, loaded only when the strategy is built.
"""

from __future__ import annotations

from collections.abc import Sequence

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engine.hugepin_settings import check_options
from offloadprobe.layout.pinned import Alloc, Event


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]) -> list[Event]:
    """One exact page-locked host mapping per buffer on the first offload, kept."""
    return [
        Alloc(name=f"{name} host mapping", nbytes=n, kind="registered")
        for name, n in zip(labels, payloads, strict=True)
    ]


STRATEGY = ModelStrategyInfo(
    name="hugepin",
    summary="exact huge-page mapping, registered in chunks during the copy",
    factory="offloadprobe.engine.hugepin_pipeline:hugepin",
    host_events=host_events,
    emulation="chunks are touched on threads but not page-locked; copies are host copies",
    check_options=check_options,
)
