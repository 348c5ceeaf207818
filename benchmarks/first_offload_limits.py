"""The limits entry of issue 38, from committed H200 results only (no device needed):
how ``hugepin`` and ``relock`` fared against the bare pipeline round by round, and what
bounds the pipeline, each figure from a measured run.

Reads the rounds files of ``first_offload_rounds.py`` (``--rounds``) and the limit
study's runs (``--study``), writes one JSON. Every figure names its source file.

    python benchmarks/first_offload_limits.py
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DAY = "2026-12-03"
ROUNDS = [f"h200-{DAY}-first-offload-rounds.json", f"h200-{DAY}-first-offload-rounds-b.json"]
STUDY = [f"h200-{DAY}-first-offload-explore.json", f"h200-{DAY}-first-offload-rounds.json"]
COLD = f"h200-{DAY}-first-offload-call1-failed.json"
CHANGES = {
    "memset-12": "the bare pipeline itself (memset, 12 threads, 64 MiB chunks)",
    "populate-12": "first touch by MADV_POPULATE_WRITE",
    "memset-14": "14 touch threads",
    "memset-8": "8 touch threads",
    "no-faults": "every page faulted in before the clock (the same writes, no fault)",
    "no-copy": "no device-to-host copies",
    "4k-pages": "4 KiB pages (no MADV_HUGEPAGE)",
    "register-256mib": "one cudaHostRegister per 256 MiB",
    "register-1gib": "one cudaHostRegister per 1 GiB",
    "two-mappings-two-registrars": "two mappings, each with its own registering thread",
    "ramp-4mib": "first chunks 4 MiB, doubling to 64",
    "chunk-32mib": "32 MiB chunks",
    "chunk-128mib": "128 MiB chunks",
}


def pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    var = (sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys)) ** 0.5
    return cov / var


def register_seconds(row: dict[str, Any]) -> float:
    """Seconds the registering thread spent in cudaHostRegister in the first offload."""
    if "register_thread_seconds" in row:
        return float(row["register_thread_seconds"])
    return float(row["stages"]["stages"][0]["register_seconds"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path, default=RESULTS / f"h200-{DAY}-first-offload-limits.json")
    a = p.parse_args()
    docs = {name: json.loads((a.results / name).read_text()) for name in {*ROUNDS, *STUDY}}
    rounds, rows = [], []
    for name in ROUNDS:
        for judged in docs[name]["judged"]:
            rounds.append(
                {
                    "file": name,
                    "round": judged["round"],
                    "strategy": judged["strategy"],
                    "first_offload_gbps": round(judged["first_offload_gbps"], 2),
                    "pipeline_first_gbps": judged["pipeline_first_gbps"],
                    "ratio": round(judged["checks"]["ratio"]["measured"], 3),
                    "ratio_to_pipeline_ramp": round(judged["ratio_to_pipeline_ramp"], 3),
                    "all_targets_met": all(c["met"] for c in judged["checks"].values()),
                }
            )
        rows += [r for rnd in docs[name]["rounds"] for r in rnd]
    firsts: dict[str, list[float]] = {}
    for r in rows:
        firsts.setdefault(r["item"], []).append(r["first_offload_gbps"])
    study: dict[str, list[dict[str, Any]]] = {}
    for name in STUDY:
        for variant, runs in docs[name].get("limit_study", {}).items():
            study.setdefault(variant, []).extend(
                {
                    "file": name,
                    "first_offload_gbps": r["first_offload_gbps"],
                    "register_seconds": r["register_thread_seconds"],
                    "first_copy_wait_seconds": r["first_copy_wait_seconds"],
                }
                for r in runs
            )
    base = statistics.median(r["first_offload_gbps"] for r in study["memset-12"])
    variants = {
        v: {
            "changes": CHANGES[v],
            "runs": runs,
            "median_first_offload_gbps": statistics.median(r["first_offload_gbps"] for r in runs),
            "median_over_pipeline": round(
                statistics.median(r["first_offload_gbps"] for r in runs) / base, 3
            ),
            "median_first_copy_wait_seconds": statistics.median(
                r["first_copy_wait_seconds"] for r in runs
            ),
        }
        for v, runs in study.items()
    }
    reg = [register_seconds(r) for r in rows]
    first = [r["first_offload_gbps"] for r in rows]
    payload = rows[0]["bytes"] if "bytes" in rows[0] else 5 * 2**30
    cold = json.loads((a.results / COLD).read_text())
    met = {s: [r["ratio"] >= 0.95 for r in rounds if r["strategy"] == s] for s in TARGETS}
    doc = {
        "benchmark": "first_offload_limits",
        "sources": sorted({*ROUNDS, *STUDY, COLD}),
        "versions": docs[ROUNDS[0]].get("versions"),
        "machine": docs[ROUNDS[0]].get("machine"),
        "rounds": rounds,
        "target": "hugepin and relock >= 0.95x the same round's bare pipeline, every round",
        "rounds_met": {s: f"{sum(m)} of {len(m)}" for s, m in met.items()},
        "first_offload_median_gbps": {k: statistics.median(v) for k, v in firsts.items()},
        "first_offload_range_gbps": {k: [min(v), max(v)] for k, v in firsts.items()},
        "bound": {
            "limited_by": "cudaHostRegister on one thread, as fast as the touch threads "
            "feed it; its seconds vary from process to process",
            "register_seconds_range": [min(reg), max(reg)],
            "register_gbps_range": [
                round(payload / max(reg) / 1e9, 1),
                round(payload / min(reg) / 1e9, 1),
            ],
            "pearson_register_seconds_vs_first_offload_gbps": round(pearson(reg, first), 3),
            "rows": len(rows),
        },
        "limit_study": variants,
        "vm_first_touch_gbps": {
            "fresh_machine": cold["vm_first_touch"]["gbps"],
            "same_memory_again": cold["vm_second_touch"]["gbps"],
            "later_calls": [docs[n]["vm_first_touch"]["gbps"] for n in ROUNDS],
            "file": COLD,
        },
        "first_process_pipeline_gbps": [
            docs[n]["first_process_pipeline"]["first_offload_gbps"] for n in ROUNDS
        ],
    }
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        json.dumps(
            {k: doc[k] for k in ("rounds_met", "first_offload_median_gbps", "bound")}, indent=1
        )
    )
    for v, d in variants.items():
        print(
            f"{v:28} {d['median_first_offload_gbps']:6.2f} GB/s {d['median_over_pipeline']:.3f}x"
            f" wait {d['median_first_copy_wait_seconds'] * 1e3:5.1f} ms  {d['changes']}"
        )


TARGETS = ("hugepin", "relock")

if __name__ == "__main__":
    main()
