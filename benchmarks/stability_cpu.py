"""Run-to-run spread of the built-in strategies' host figures (CPU emulation or CUDA).

Runs ``offloadprobe run --strategy S --json`` ``--repeats`` times per strategy, each in a
fresh process as a user would, and prints per strategy the mean and the largest relative
deviation from the mean of ``host_peak_x`` and ``steady_host_x`` (the figures must agree
within +-2%). ``--out PATH`` writes every run's figures and each phase's RssAnon/RssFile/
RssShmem as JSON.

    python benchmarks/stability_cpu.py --repeats 5 --out benchmarks/results/stability.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("naive", "lazy", "registered", "pageable")


def _one(strategy: str, extra: list[str], folder: Path, index: int) -> dict:
    out = folder / f"{strategy}-{index}.json"
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "offloadprobe",
            "run",
            "--strategy",
            strategy,
            "--no-progress",
            "--json",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{strategy} run {index} failed ({proc.returncode}): {proc.stderr}")
    doc = json.loads(out.read_text())
    run = doc["runs"][0]
    phases = [
        {k: p[k] for k in ("phase", "bytes_moved")} | {"cycle": c["cycle"]} | p["host"]
        for c in run["cycles"]
        for p in c["phases"]
    ]
    return {
        "host_peak_x": run["summary"]["host_peak_x"],
        "steady_host_x": run["summary"]["steady_host_x"],
        "payload_bytes": doc["payload_bytes"],
        "phases": phases,
    }


def _spread(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, max(abs(v - mean) / mean for v in values) if mean else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more `offloadprobe run` flags (after --)")
    args = parser.parse_args()
    extra = ["--device", args.device, *args.extra]
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in args.strategies.split(","):
            results[strategy] = [_one(strategy, extra, Path(tmp), i) for i in range(args.repeats)]
            print(f"{strategy}: done", file=sys.stderr, flush=True)
    rows = []
    print(
        f"{'strategy':<11} {'host_peak_x mean':>16} {'spread':>7} {'steady_x mean':>14} "
        f"{'spread':>7}  runs"
    )
    for strategy, runs in results.items():
        peak, peak_dev = _spread([r["host_peak_x"] for r in runs])
        steady, steady_dev = _spread([r["steady_host_x"] for r in runs])
        rows.append(
            {
                "strategy": strategy,
                "host_peak_x_mean": peak,
                "host_peak_x_spread": peak_dev,
                "steady_host_x_mean": steady,
                "steady_host_x_spread": steady_dev,
            }
        )
        values = " ".join(f"{r['host_peak_x']:.3f}/{r['steady_host_x']:.3f}" for r in runs)
        print(
            f"{strategy:<11} {peak:>16.3f} {peak_dev:>6.2%} {steady:>14.3f} {steady_dev:>6.2%}"
            f"  {values}"
        )
    if args.out is not None:
        import torch

        doc = {
            "flags": extra,
            "repeats": args.repeats,
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "machine": {"node": platform.node(), "cpus": os.cpu_count()},
            "spread": rows,
            "runs": results,
        }
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
