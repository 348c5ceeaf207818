"""Where the first offload's time goes for an exact-size registered host buffer (CUDA).

The first offload of ``registered`` allocates the host buffer, the kernel faults its pages
in (on first touch), ``cudaHostRegister`` page-locks it, and only then does the copy run at
PCIe speed. This times each step on its own for one buffer of ``--size`` bytes, then the
same copy into the now-registered buffer (the steady state), and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from offloadprobe.core import environment
from offloadprobe.core.units import parse_size

_PORTABLE = 1


def _timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5GiB")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    nbytes = parse_size(args.size)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    steps: dict[str, float] = {}
    holder: dict[str, torch.Tensor] = {}
    steps["torch.empty (host, untouched)"] = _timed(
        lambda: holder.setdefault("host", torch.empty(nbytes, dtype=torch.uint8))
    )
    host = holder["host"]
    steps["first touch (page faults, fill_)"] = _timed(lambda: host.fill_(0))
    cudart = torch.cuda.cudart()
    steps["cudaHostRegister"] = _timed(
        lambda: cudart.cudaHostRegister(host.data_ptr(), nbytes, _PORTABLE)
    )
    steps["copy D2H into the registered buffer (first)"] = _timed(lambda: host.copy_(device))
    steps["copy D2H into the registered buffer (again)"] = _timed(lambda: host.copy_(device))
    cudart.cudaHostUnregister(host.data_ptr())
    first_total = sum(list(steps.values())[:4])
    doc = {
        "benchmark": "first_cycle_breakdown",
        "bytes": nbytes,
        "seconds": steps,
        "first_offload_seconds": first_total,
        "first_offload_gbps": nbytes / first_total / 1e9,
        "steady_gbps": nbytes / steps["copy D2H into the registered buffer (again)"] / 1e9,
        "versions": environment.versions(),
        "machine": environment.machine(),
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
