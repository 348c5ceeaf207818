"""Cost of the round-trip fingerprint against the load it checks (CUDA; CPU for a smoke run).

Times ``engine.model.integrity.fingerprint`` of a ``--size`` bf16 buffer on the device
(median of ``--repeats`` after a warm-up) and a pinned host-to-device copy of the same
bytes (what a ``lazy`` load does), and reports the fingerprint as a fraction of the copy:
it must stay under 5%. Also checks the fingerprint catches a one-ULP change and a swap.

    python benchmarks/fingerprint_cost.py --size 5GiB --out benchmarks/results/fingerprint.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from offloadprobe.core.units import parse_size
from offloadprobe.core import environment
from offloadprobe.engine.model.integrity import FingerprintKey, fingerprint


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_seconds(fn, device: torch.device, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(nbytes: int, device: torch.device, repeats: int) -> dict:
    numel = nbytes // 2
    buf = torch.empty(numel, dtype=torch.bfloat16, device=device)
    buf.view(torch.int16).random_(-(1 << 15), 1 << 15)
    host = torch.empty(numel, dtype=torch.bfloat16, pin_memory=device.type == "cuda")
    host.copy_(buf)
    key = FingerprintKey()
    fp_s = _median_seconds(lambda: fingerprint(buf, key), device, repeats)
    copy_s = _median_seconds(lambda: buf.copy_(host, non_blocking=True), device, repeats)
    base = fingerprint(buf, key)
    words = buf.view(torch.int16)
    words[numel // 3] += 1  # one ULP
    ulp_caught = fingerprint(buf, key) != base
    words[numel // 3] -= 1
    i, j = 17, 17 + 65_521
    a, b = words[i].clone(), words[j].clone()
    words[i], words[j] = b, a
    swap_caught = bool(a == b) or fingerprint(buf, key) != base
    return {
        "bytes": nbytes,
        "device": str(device),
        "fingerprint_s": fp_s,
        "fingerprint_GBps": nbytes / fp_s / 1e9,
        "pinned_h2d_s": copy_s,
        "pinned_h2d_GBps": nbytes / copy_s / 1e9,
        "fingerprint_over_load": fp_s / copy_s,
        "under_5_percent": fp_s / copy_s < 0.05,
        "one_ulp_caught": ulp_caught,
        "swap_65521_apart_caught": swap_caught,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5GiB", help="buffer size (default 5GiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    result = measure(parse_size(args.size, what="--size"), torch.device(args.device),
                     args.repeats)  # fmt: skip
    doc = {
        "benchmark": "fingerprint_cost",
        "result": result,
        "versions": environment.versions(),
        "machine": environment.machine(),
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
