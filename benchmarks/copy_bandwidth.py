"""The machine's own host<->device copy bandwidth, pinned and pageable (CUDA only)."""

from __future__ import annotations

import statistics
import time

import torch


def _time_copy(dst: torch.Tensor, src: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def measure(nbytes: int = 2 * 2**30, repeats: int = 4) -> dict[str, float]:
    """Median GB/s of D2H and H2D copies of ``nbytes`` (default 2 GiB), pinned and pageable."""
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    out = {}
    for kind, pinned in (("pinned", True), ("pageable", False)):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(1)
        out[f"{kind}_d2h_GBps"] = nbytes / _time_copy(host, device, repeats) / 1e9
        out[f"{kind}_h2d_GBps"] = nbytes / _time_copy(device, host, repeats) / 1e9
        del host
    del device
    torch.cuda.empty_cache()
    return {k: round(v, 2) for k, v in out.items()}


if __name__ == "__main__":
    print(measure())
