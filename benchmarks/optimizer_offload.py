"""GPU benchmark: optimizer-state strategies in both optimizer modes, what stays behind.

For ``legacy``, ``fixed`` and ``complete`` with the classic and the precision-aware
optimizer, runs ``offloadprobe run`` (model parameters offloaded with ``registered``,
exact-size, so the host bytes beyond the payload are the optimizer's) on a model of
about 1 GiB of parameters for 3 cycles, each in a fresh process, three at a time
(every reading is per process: VmHWM, pinned stats, the CUDA allocator). Writes one
JSON named by machine and date.

    python benchmarks/optimizer_offload.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MODES = {"classic": [], "precision_aware": ["--precision-aware"]}
STRATEGIES = ["legacy", "fixed", "complete"]


def one(mode: str, strategy: str, payload: str, tmp: Path, device: str = "cuda") -> dict:
    out = tmp / f"{mode}-{strategy}.json"
    cmd = [
        sys.executable,
        "-m",
        "offloadprobe",
        "run",
        "--device",
        device,
        "--strategy",
        "registered",
        "--optimizer-strategy",
        strategy,
        *MODES[mode],
        "--payload",
        payload,
        "--cycles",
        "3",
        "--no-progress",
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not out.exists():
        return {
            "mode": mode,
            "strategy": strategy,
            "exit_code": proc.returncode,
            "stderr": proc.stderr[-2000:],
        }
    doc = json.loads(out.read_text())
    run = doc["runs"][0]
    s = run["summary"]
    opt_bytes = s["optimizer_state_bytes"]
    per_cycle = []
    for cycle in run["cycles"]:
        # parameters and optimizer state move as separate phases (schema 2): read the
        # host and GPU after the cycle's last offload, the residency from the audited one
        offs = [p for p in cycle["phases"] if p["phase"] in ("offload", "offload optimizer")]
        off, audited = offs[-1], next(p for p in offs if p["phase"] == "offload")
        host = off["host"]["rss_after"] - off["host"]["device_in_host_after"]
        host -= run["baseline_host_bytes"]
        per_cycle.append(
            {
                "cycle": cycle["cycle"],
                "host_after_offload_bytes": host,
                "optimizer_host_bytes": host - run["payload_bytes"],
                "optimizer_host_x": round((host - run["payload_bytes"]) / opt_bytes, 4),
                "gpu_allocated_after_offload_bytes": (off["gpu"] or {}).get("allocated_after"),
                "left_on_gpu_by_key": audited["left_on_device"],
                "pinned_reserved_bytes": (off["pinned"] or {}).get("reserved_after"),
                "offload_gbps": off["gbps"],
                "optimizer_part": s.get("optimizer"),
            }
        )
    return {
        "mode": mode,
        "strategy": strategy,
        "exit_code": proc.returncode,
        "optimizer": run["optimizer"],
        "payload_bytes": run["payload_bytes"],
        "param_count_approx": run["payload_bytes"] // 2,
        "optimizer_state_bytes": opt_bytes,
        "gpu_baseline_before_model_bytes": run["gpu_baseline_bytes"],
        "gpu_left_after_offload_bytes": s["gpu_left_after_offload_bytes"],
        "left_after_offload_bytes_by_key": s["left_after_offload_bytes_by_key"],
        "integrity_ok": s["integrity_ok"],
        "integrity": run["integrity"],
        "per_cycle": per_cycle,
        "versions": doc["versions"],
        "machine": doc["machine"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--payload", default="1GiB")
    parser.add_argument("--machine", default="h200")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    day = dt.date.today().isoformat()
    jobs = [(m, s) for m in MODES for s in STRATEGIES]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: one(*job, args.payload, Path(tmp), args.device), jobs))
    doc = {
        "benchmark": "optimizer_offload",
        "date": day,
        "payload": args.payload,
        "commit": os.environ.get("GIT_COMMIT"),
        "runs": results,
    }
    path = args.out / f"{args.machine}-{day}-optimizer-offload.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    for r in results:
        left = r.get("left_after_offload_bytes_by_key")
        print(
            r["mode"],
            r["strategy"],
            r["exit_code"],
            r.get("gpu_left_after_offload_bytes"),
            left,
            [c["optimizer_host_x"] for c in r.get("per_cycle", [])],
            r.get("stderr", "")[-300:],
        )


if __name__ == "__main__":
    main()
