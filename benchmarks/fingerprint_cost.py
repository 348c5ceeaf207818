"""Cost and catch of the round-trip fingerprint (CUDA; CPU for a smoke run).

Times ``engine.model.fingerprint.fingerprint`` of a ``--size`` bf16 buffer on the device
(median of ``--repeats`` after a warm-up; on CUDA the fused Triton kernel where Triton
imports, else torch ops: ``backend`` says which) and a pinned host-to-device copy of the
same bytes (what a ``lazy`` load does), and reports the fingerprint as a fraction of the
copy: it must stay under 5%. Checks that the host path gives the same value for a host
copy of the same bytes, and that each structured corruption the linear hash missed is
caught (applied and undone in place): two sign bits in one block, every 4th bf16
negated, every odd fp32 negated, two rows negated, one ULP, a swap 65,521 apart.
``--torch-ops`` also times the torch-ops fallback; ``--sweep`` Triton tile and warp counts.

    python benchmarks/fingerprint_cost.py --size 5GiB --torch-ops --sweep \\
        --out benchmarks/results/fingerprint.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from offloadprobe.core import environment
from offloadprobe.core.units import parse_size
from offloadprobe.engine.model import fingerprint as fp

SIGN16, SIGN32, SIGN64 = -(1 << 15), -(1 << 31), -(1 << 63)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _corruptions(buf: torch.Tensor) -> dict[str, Callable[[], None]]:
    """Each applies a change that applying it again undoes (XOR of sign bits, a swap)."""
    half, full = buf.view(torch.int16), buf.view(torch.int64)
    rows = half[: half.numel() // 4096 * 4096].view(-1, 4096)
    i, j = 17, 17 + 65_521

    def sign_bits() -> None:
        full[[1000, 2000]] ^= SIGN64

    def every_fourth_bf16() -> None:
        half[3::4] ^= SIGN16

    def every_odd_fp32() -> None:
        buf.view(torch.int32)[1::2] ^= SIGN32

    def two_rows() -> None:
        rows[[5, min(900, rows.shape[0] - 1)]] ^= SIGN16

    def one_ulp() -> None:
        half[half.numel() // 3] ^= 1

    def swap() -> None:
        half[[i, j]] = half[[j, i]]

    return {
        "two sign bits in one block": sign_bits,
        "every 4th bf16 negated": every_fourth_bf16,
        "every odd fp32 negated": every_odd_fp32,
        "two rows negated": two_rows,
        "one ULP": one_ulp,
        "swap 65521 apart": swap,
    }


def _caught(buf: torch.Tensor, key: fp.FingerprintKey) -> dict[str, bool]:
    base = fp.fingerprint(buf, key)
    caught = {}
    for name, change in _corruptions(buf).items():
        change()
        caught[name] = fp.fingerprint(buf, key) != base
        change()
    assert fp.fingerprint(buf, key) == base, "a corruption was not undone"
    return caught


def _sweep(buf: torch.Tensor, key: fp.FingerprintKey, repeats: int) -> list[dict]:
    from offloadprobe.engine.model import fingerprint_triton as kernel

    words, keys, found = buf.view(torch.int64), key.on(buf.device), []
    want = int(kernel.keyed_sum(words, 0, keys))
    for tile in (1024, 2048, 4096, 8192):
        for warps in (4, 8, 16):

            def run(tile: int = tile, warps: int = warps) -> torch.Tensor:
                return kernel.keyed_sum(words, 0, keys, tile=tile, warps=warps)

            seconds = _median_seconds(run, buf.device, repeats)
            found.append({"tile": tile, "warps": warps, "s": seconds, "same": int(run()) == want})
    return found


def measure(
    nbytes: int, device: torch.device, repeats: int, *, torch_ops: bool = False, sweep: bool = False
) -> dict:
    numel = nbytes // 2
    buf = torch.empty(numel, dtype=torch.bfloat16, device=device)
    buf.view(torch.int16).random_(-(1 << 15), 1 << 15)
    host = torch.empty(numel, dtype=torch.bfloat16, pin_memory=device.type == "cuda")
    host.copy_(buf)
    key = fp.FingerprintKey()
    fp_s = _median_seconds(lambda: fp.fingerprint(buf, key), device, repeats)
    copy_s = _median_seconds(lambda: buf.copy_(host, non_blocking=True), device, repeats)
    start = time.perf_counter()
    on_host = fp.fingerprint(host, key)
    host_s = time.perf_counter() - start
    result = {
        "bytes": nbytes,
        "device": str(device),
        "backend": fp.backend(device),
        "fingerprint_s": fp_s,
        "fingerprint_GBps": nbytes / fp_s / 1e9,
        "pinned_h2d_s": copy_s,
        "pinned_h2d_GBps": nbytes / copy_s / 1e9,
        "fingerprint_over_load": fp_s / copy_s,
        "under_5_percent": fp_s / copy_s < 0.05,
        "host_fingerprint_s": host_s,
        "host_threads": torch.get_num_threads(),
        "host_equals_device": on_host == fp.fingerprint(buf, key),
        "caught": _caught(buf, key),
    }
    if torch_ops:
        words = buf.view(torch.int64)

        def ops() -> torch.Tensor:
            return fp.torch_sum(words, 0, key)

        result["torch_ops_s"] = _median_seconds(ops, device, repeats)
        result["torch_ops_equal"] = (int(ops()) & fp.MASK) == on_host[2]
    if sweep and result["backend"] == "triton":
        result["triton_sweep"] = _sweep(buf, key, repeats)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5GiB", help="buffer size (default 5GiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--torch-ops", action="store_true", help="also time the fallback")
    parser.add_argument("--sweep", action="store_true", help="time Triton tiles and warps")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    size = parse_size(args.size, what="--size")
    device = torch.device(args.device)
    result = measure(size, device, args.repeats, torch_ops=args.torch_ops, sweep=args.sweep)
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
