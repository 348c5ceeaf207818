"""GPU benchmark: model-parameter strategies at a ~5 GiB payload, two allocator settings.

Runs ``offloadprobe compare naive lazy registered pageable`` (each strategy in a
fresh process) with the default allocator and with
``--alloc-conf pinned_use_cuda_host_register:True``, next to this machine's own
pinned/pageable copy bandwidth, and writes one JSON named by machine and date.

    python benchmarks/offload_strategies.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from copy_bandwidth import measure  # noqa: E402

STRATEGIES = ["naive", "lazy", "registered", "pageable"]
ALLOC_CONFS = {"default": None, "cuda_host_register": "pinned_use_cuda_host_register:True"}


def per_cycle(run: dict) -> list[dict]:
    """Each offload's host peak as a multiple of the payload, two ways."""
    payload, base = run["payload_bytes"], run["baseline_host_bytes"]
    rows = []
    for cycle in run["cycles"]:
        for phase in cycle["phases"]:
            if phase["phase"] != "offload":
                continue
            host = phase["host"]
            rows.append(
                {
                    "cycle": cycle["cycle"],
                    "host_peak_over_baseline_x": round((host["peak"] - base) / payload, 3),
                    "host_peak_over_phase_start_x": round(
                        (host["peak"] - host["rss_before"]) / payload, 3
                    ),
                    "pinned_reserved_bytes": (phase["pinned"] or {}).get("reserved_after"),
                    "offload_gbps": phase["gbps"],
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--payload", default="5GiB")
    parser.add_argument("--cycles", default="3")
    parser.add_argument("--machine", default="h200")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    day = dt.date.today().isoformat()
    result: dict = {
        "benchmark": "offload_strategies",
        "date": day,
        "payload": args.payload,
        "commit": os.environ.get("GIT_COMMIT"),
        "copy_bandwidth_2GiB": measure(),
        "compares": {},
    }
    for name, conf in ALLOC_CONFS.items():
        stem = f"{args.machine}-{day}-compare-{name}"
        cmd = [
            sys.executable,
            "-m",
            "offloadprobe",
            "compare",
            *STRATEGIES,
            "--device",
            "cuda",
            "--payload",
            args.payload,
            "--cycles",
            args.cycles,
            "--json",
            str(args.out / f"{stem}.json"),
            "--markdown",
            str(args.out / f"{stem}.md"),
        ]
        if conf:
            cmd += ["--alloc-conf", conf]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)
        doc = json.loads((args.out / f"{stem}.json").read_text())
        result["versions"] = doc.get("versions")
        result["machine"] = doc.get("machine")
        result["compares"][name] = {
            "alloc_conf": conf,
            "runs": {
                r["strategy"]: {
                    "verdict": r["verdict"],
                    "summary": r["summary"],
                    "payload_bytes": r.get("payload_bytes"),
                    "per_cycle": per_cycle(r) if r["summary"] else [],
                }
                for r in doc["runs"]
            },
        }
    path = args.out / f"{args.machine}-{day}-offload-strategies.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["copy_bandwidth_2GiB"]))
    for name, comp in result["compares"].items():
        for strategy, r in comp["runs"].items():
            s = r["summary"] or {}
            print(
                name,
                strategy,
                r["verdict"],
                s.get("host_peak_x"),
                s.get("steady_host_x"),
                s.get("pinned_reserved_bytes"),
                s.get("offload_gbps"),
                s.get("load_gbps"),
            )


if __name__ == "__main__":
    main()
