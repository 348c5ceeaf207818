"""Print docs/ranks.md's "plan against measurement" table from a committed result.

    python benchmarks/ranks_projection_table.py [RESULT.json]

(default: benchmarks/results/cpu-2026-11-30-ranks-projection.json)

One row per case (layout x strategy pair): whether every rank's payload equals the
projection, the worst rank's error on each part's host peak, the error on the rank's
whole peak, the node cgroup's peak against the plan's node sum (both parts in verl's
order, and with the two peaks simply added), and the verdict against the tolerance.
Errors are (measured - predicted) / predicted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "results" / "cpu-2026-11-30-ranks-projection.json"


def _pct(e: float | None) -> str:
    return "-" if e is None else f"{100 * e:+.1f}%"


def _worst(ranks: list[dict[str, Any]], key: str) -> float | None:
    errors = [r[key]["error"] for r in ranks if r[key]["error"] is not None]
    return max(errors, key=abs) if errors else None


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    for c in doc["cases"]:
        pair = f"{c['strategy']} + {c['optimizer_strategy']}"
        pair += " (p-a)" if c["precision_aware"] else ""
        name = c["name"].split(" ")[0]
        if c["error"]:
            out.append([name, pair, *["-"] * 7, "failed"])
            continue
        node = c["nodes"][0]
        payload = c["ranks"][0]["payload"]["measured"]
        moves = node["offload_peak"]
        out.append(
            [
                name,
                pair,
                f"{_mib(payload)} {'=' if c['payload_exact'] else '!='}",
                _pct(_worst(c["ranks"], "params_peak")),
                _pct(_worst(c["ranks"], "optimizer_peak")),
                _pct(_worst(c["ranks"], "rank_offload_peak")),
                f"{_mib(moves['measured'])} / {_mib(moves['predicted'])} ({_pct(moves['error'])})",
                f"{_pct(node['peak']['error'])}, {_mib(node['train_left_bytes'])}",
                _pct(node["peak_added_rule"]["error"]),
                "ok" if c["within_tolerance"] else "outside",
            ]
        )
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    doc = json.loads(Path(args[0] if args else DEFAULT).read_text())
    head = [
        "layout",
        "params + optimizer",
        "payload MiB (= plan)",
        "params peak",
        "optimizer peak",
        "rank peak",
        "node peak MiB: measured / plan",
        "node raw peak, train left MiB",
        "node, peaks added",
        "verdict",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows(doc):
        print("| " + " | ".join(r) + " |")
    v = doc["versions"] or {}
    print(
        f"\n{doc['device']}{' (CPU emulation)' if doc['emulated'] else ''}; torch "
        f"{v.get('torch')}, megatron-core {v.get('megatron_core')}; about "
        f"{doc['payload_per_rank']} per rank, {doc['cycles']} cycles; tolerance "
        f"{100 * doc['tolerance']:g}%; {sum(c['within_tolerance'] for c in doc['cases'])} of "
        f"{len(doc['cases'])} cases within it"
    )


if __name__ == "__main__":
    main()
