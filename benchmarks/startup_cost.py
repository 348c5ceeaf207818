"""Benchmark: CPU seconds of one ``offloadprobe run`` process, with the cyclic collector
paused for the imports (as shipped, ``core/collector.py``) and not paused.

Every child and rank is such a process, so its fixed cost is paid once per row of a
compare, per rank, per repro child and per fresh-process test. Fresh processes in
interleaved pairs (paused-unpaused, unpaused-paused, ...), so that drift and the machine's
other tenants hit both alike; each process's user+system CPU comes from
``RUSAGE_CHILDREN``. Reported: the median of each, the median per-pair saving with a 95%
bootstrap interval (resampling pairs), and for scale the CPU of a misspelt strategy name,
which fails before torch is imported.

    python benchmarks/startup_cost.py --pairs 12 --out RESULT.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import random
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    "run",
    "--strategy",
    "lazy",
    "--payload",
    "4MiB",
    "--cycles",
    "1",
    "--no-progress",
    "--no-reference-check",
    "--device",
    "cpu",
]
SHIPPED = "from offloadprobe.cli import main; main()"
UNPAUSED = (
    "from offloadprobe.core import collector; collector.pause_for_imports = lambda: None; "
    "from offloadprobe.cli import main; main()"
)
RESAMPLES = 10_000


def cpu_of(code: str, args: list[str]) -> float:
    """User+system CPU seconds of one fresh ``python -c code args...``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interval(values: list[float], rng: random.Random) -> tuple[float, float]:
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(RESAMPLES)
    )
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rng = random.Random(0)
    paused, unpaused = [], []
    for i in range(args.pairs):
        order = [(SHIPPED, paused), (UNPAUSED, unpaused)]
        for code, into in order if i % 2 == 0 else order[::-1]:
            into.append(cpu_of(code, RUN))
        print(f"pair {i}: paused {paused[-1]:.2f} s, unpaused {unpaused[-1]:.2f} s")
    saving = [u - p for p, u in zip(paused, unpaused, strict=True)]
    low, high = interval(saving, rng)
    misspelt = [cpu_of(SHIPPED, ["run", "--strategy", "lasy"]) for _ in range(3)]
    import torch

    result = {
        "benchmark": "startup_cost",
        "date": dt.date.today().isoformat(),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "command": ["offloadprobe", *RUN],
        "pairs": args.pairs,
        "cpu_s_paused": paused,
        "cpu_s_unpaused": unpaused,
        "median_cpu_s_paused": statistics.median(paused),
        "median_cpu_s_unpaused": statistics.median(unpaused),
        "median_saving_cpu_s": statistics.median(saving),
        "saving_95ci_cpu_s": [low, high],
        "misspelt_strategy_cpu_s": misspelt,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"median CPU per process: paused {result['median_cpu_s_paused']:.2f} s, unpaused "
        f"{result['median_cpu_s_unpaused']:.2f} s; saving {result['median_saving_cpu_s']:.2f} s "
        f"(95% CI {low:.2f} to {high:.2f}); misspelt name {statistics.median(misspelt):.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
