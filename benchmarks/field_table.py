"""Print the "what each framework's offload costs" table from committed results
(docs/field-offloads.md and docs/h200-results.md show it, written by tools/figures.py).

Every number comes from ``benchmarks/results/h200x2-2026-11-30-*.json`` (the field
benchmark and the separate 5 GiB ``tms`` compare); run from the repository root.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FIELD = RESULTS / "h200x2-2026-11-30-field-strategies-params-optimizer.json"
TMS = RESULTS / "h200x2-2026-11-30-compare-tms-5gib.json"
GiB = 2**30
HEAD = [
    "part",
    "row",
    "host peak",
    "steady host",
    "pinned reserved",
    "GPU left",
    "offload GB/s first / steady",
    "load GB/s first / steady",
    "verdict",
]


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _rate(first: float | None, steady: float | None) -> str:
    if first is None or steady is None:
        return "-"
    return f"{first:.1f} / {steady:.1f}"


def rows() -> list[list[str]]:
    out = []
    for r in json.loads(FIELD.read_text())["rows"]:
        part = r["params"] if r["part"] == "params" else r["optimizer"]
        if r["part"] == "params" and r["strategy"] == "tms":
            continue  # measured on its own below (this run predates the driver check)
        peak = part["host_peak_x"] if part else None
        steady = part["steady_host_x"] if part else None
        out.append(
            [
                r["part"],
                r["row"],
                _x(peak),
                _x(steady),
                _gib(r["pinned_reserved_bytes"]),
                _gib(r["gpu_left_bytes"]),
                _rate(r["first_offload_gbps"], r["offload_gbps"]),
                _rate(r["first_load_gbps"], r["load_gbps"]),
                r["verdict"],
            ]
        )
    tms = json.loads(TMS.read_text())["runs"][0]
    s = tms["summary"]
    out.insert(
        3,
        [
            "params",
            "torch_memory_saver (tms)",
            _x(s["host_peak_x"]),
            _x(s["steady_host_x"]),
            "0 (own cudaMallocHost)",
            _gib(s["gpu_left_after_offload_bytes"]) + " (paused, still counted)",
            _rate(s["first_offload_gbps"], s["offload_gbps"]),
            _rate(s["first_load_gbps"], s["load_gbps"]),
            tms["verdict"],
        ],
    )
    return out


def main() -> None:
    head = HEAD
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows():
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
