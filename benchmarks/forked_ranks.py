"""Benchmark: ranks forked from offloadprobe's launcher against fresh ranks (CPU emulation).

The same ``offloadprobe run --nproc-per-node 2`` runs in turns with forked ranks (what
CPU emulation does) and with fresh ``python -m offloadprobe.engine.worker`` ranks (the
path a GPU host takes, forced here through a ``sitecustomize`` on the run's
``PYTHONPATH`` that turns ``engine.world.forked.forks_cleanly`` off). Each run is a process of
its own (a lone run: its launcher is a fresh interpreter, not forked from a zygote), so
its CPU seconds are this process's reaped children's: the CLI parent, the launcher and
the ranks it reaped. Per run it records each rank's host figures (baseline RSS before
the first offload, host peak, steady host) and the node cgroup's (usage at the first
offload, peak, steady). The claim it checks: forked ranks read the fresh ranks' figures
within the run-to-run spread of fresh runs, for a fraction of the CPU.

    python benchmarks/forked_ranks.py --runs 3 --out RESULT.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from offloadprobe.core import environment  # noqa: E402

STRATEGIES = ("naive", "lazy")
FRESH = (
    "import offloadprobe.engine.world.forked as forked\n"
    "forked.forks_cleanly = lambda device: False  # fresh ranks, as on a GPU host\n"
)
RANK_KEYS = ("baseline_host_bytes", "host_peak_bytes", "steady_host_bytes")
NODE_KEYS = ("baseline_bytes", "peak_bytes", "steady_bytes")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _one(strategy: str, mode: str, args: argparse.Namespace, site: Path) -> dict[str, Any]:
    out = site / "run.json"
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    if mode == "fresh":
        path.insert(0, str(site / "fresh"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    cmd = [sys.executable, "-m", "offloadprobe", "run", "--nproc-per-node", "2"]
    cmd += ["--device", "cpu", "--payload", args.payload, "--layers", "2"]
    cmd += ["--cycles", str(args.cycles), "--no-reference-check", "--no-progress"]
    cmd += ["--strategy", strategy, "--json", str(out)]
    before, start = _children_cpu(), time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=site, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - start, _children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"{mode} {strategy} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    world = json.loads(out.read_text())["runs"][0]["world"]
    ranks = [
        {
            "baseline_host_bytes": r["baseline_host_bytes"],
            **{k: r["summary"][k] for k in RANK_KEYS[1:]},
        }
        for r in world["ranks"]
    ]
    (node,) = world["nodes"]
    return {
        "strategy": strategy,
        "mode": mode,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "ranks": ranks,
        "node": {k: node[k] for k in NODE_KEYS},
    }


def _values(rows: list[dict[str, Any]], strategy: str, mode: str, key: str) -> list[float]:
    picked = [r for r in rows if r["strategy"] == strategy and r["mode"] == mode]
    if key in NODE_KEYS:
        return [r["node"][key] for r in picked]
    return [rank[key] for r in picked for rank in r["ranks"]]


def _summary(rows: list[dict[str, Any]], strategies: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for strategy in strategies:
        for key in (*RANK_KEYS, *NODE_KEYS):
            fresh = _values(rows, strategy, "fresh", key)
            forked = _values(rows, strategy, "forked", key)
            out[f"{strategy} {key}"] = {
                "fresh_mean": round(sum(fresh) / len(fresh)),
                "forked_mean": round(sum(forked) / len(forked)),
                "forked_minus_fresh": round(sum(forked) / len(forked) - sum(fresh) / len(fresh)),
                "fresh_spread": max(fresh) - min(fresh),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per strategy and mode")
    parser.add_argument("--payload", default="16MiB")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--strategy", action="append", choices=STRATEGIES, dest="strategies")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    strategies = tuple(args.strategies or STRATEGIES)
    rows = []
    loads = [os.getloadavg()[0]]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forked-ranks-") as tmp:
        site = Path(tmp)
        (site / "fresh").mkdir()
        (site / "fresh" / "sitecustomize.py").write_text(FRESH)
        for _ in range(args.runs):
            for strategy in strategies:
                for mode in ("fresh", "forked"):
                    rows.append(_one(strategy, mode, args, site))
                    loads.append(os.getloadavg()[0])
    cpu = {
        m: round(sum(r["cpu_s"] for r in rows if r["mode"] == m), 3) for m in ("fresh", "forked")
    }
    result = {
        "benchmark": "forked_ranks",
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", "benchmarks/forked_ranks.py", *(argv or sys.argv[1:])]),
        "runtime_s": round(time.monotonic() - started, 1),
        "machine": environment.machine(),
        "versions": environment.versions(),
        "payload": args.payload,
        "load_average_min_max": [min(loads), max(loads)],
        "cpu_s": cpu,
        "summary": _summary(rows, strategies),
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"cpu_s": cpu, "summary": result["summary"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
