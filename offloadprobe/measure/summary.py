"""Derive a run's figures of merit from its phase records (pure functions)."""

from __future__ import annotations

from statistics import median

from offloadprobe.core.records import PhaseRecord, RunSummary


def _ratio(value: int, payload: int) -> float:
    return value / payload if payload else 0.0


def _rates(phases: list[PhaseRecord], name: str) -> tuple[float | None, float | None]:
    """(first-cycle rate, steady rate = median of the later cycles, or the first)."""
    rates = [p.gbps for p in phases if p.phase == name]
    if not rates:
        return None, None
    later = [r for r in rates[1:] if r is not None]
    steady = median(later) if later else rates[0]
    return rates[0], steady


def summarise(
    phases: list[PhaseRecord],
    *,
    payload_bytes: int,
    baseline_host_bytes: int,
    gpu_baseline_bytes: int | None,
    registered_bytes: int,
    integrity_ok: bool,
    optimizer_state_bytes: int | None = None,
) -> RunSummary:
    """Summarise offload/load cycles.

    - host peak: the highest host high-water mark of any offload or load phase,
      over the host RSS just before the first offload (train phases are excluded:
      their host use is the framework's, not the strategy's). In CPU emulation the
      emulated device bytes are taken out of every host figure first;
    - steady host: host RSS after the last offload, over that same baseline;
    - pinned reserved: pinned bytes PyTorch's allocator owns after the last offload,
      plus bytes the strategy page-locked itself (cudaHostRegister);
    - GPU left: bytes still allocated after the last offload, over the allocation
      before the model existed.
    """
    moving = [p for p in phases if p.phase in ("offload", "load")]
    offloads = [p for p in phases if p.phase == "offload"]
    peak = max(p.host.host_peak for p in moving) - baseline_host_bytes
    last = offloads[-1]
    steady = last.host.host_rss_after - baseline_host_bytes
    pinned = None if last.pinned is None else last.pinned.reserved_after + registered_bytes
    gpu_left = None
    if last.gpu is not None and gpu_baseline_bytes is not None:
        gpu_left = last.gpu.allocated_after - gpu_baseline_bytes
    first_offload, offload = _rates(phases, "offload")
    first_load, load = _rates(phases, "load")
    return RunSummary(
        host_peak_bytes=peak,
        host_peak_x=_ratio(peak, payload_bytes),
        steady_host_bytes=steady,
        steady_host_x=_ratio(steady, payload_bytes),
        pinned_reserved_bytes=pinned,
        gpu_left_after_offload_bytes=gpu_left,
        offload_gbps=offload,
        load_gbps=load,
        first_offload_gbps=first_offload,
        first_load_gbps=first_load,
        integrity_ok=integrity_ok,
        left_after_offload_bytes_by_key=last.left_on_device,
        optimizer_state_bytes=optimizer_state_bytes,
        steady_host_x_optimizer_state=(
            steady / optimizer_state_bytes if optimizer_state_bytes else None
        ),
    )
