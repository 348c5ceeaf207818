"""Benchmark: CPU-emulation rows forked from the zygote against fresh interpreters.

The same ``compare`` is run twice in this process, once with every row a fresh
interpreter (the zygote kept off) and once forked from the zygote (started for the
first row: ``compare`` expects several). Per row it records the worker's CPU seconds
(the fresh workers' from this process's reaped children; the forked workers' from the
zygote's, which reaps them; the zygote's own imports counted once, apart), the row's wall
time, and its host figures (host peak and steady host, x of the moved bytes). The
claim it checks: forked rows cost the imports once, not once per row, and read the same
host figures as fresh rows, within the run-to-run noise of fresh rows themselves
(``spread``: the largest minus the smallest reading of a strategy's fresh rows).

    python benchmarks/zygote_rows.py --rows 6 --out RESULT.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import psutil  # noqa: E402

from offloadprobe.cli import main  # noqa: E402
from offloadprobe.core import environment  # noqa: E402
from offloadprobe.isolation import zygote  # noqa: E402

STRATEGIES = ("naive", "lazy")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _forked_cpu() -> tuple[float, float]:
    """The zygote's own CPU and its reaped workers' (0, 0 while none runs)."""
    own = children = 0.0
    for made in zygote.running():
        times = psutil.Process(made.proc.pid).cpu_times()
        own += times.user + times.system
        children += times.children_user + times.children_system
    return own, children


def _one(strategy: str, payload: str, out: Path) -> dict[str, Any]:
    """One row as ``compare`` would run it (``run`` with the same settings)."""
    before_fresh, (_, before_forked) = _children_cpu(), _forked_cpu()
    start = time.monotonic()
    args = ["run", "--device", "cpu", "--no-progress", "--payload", payload]
    args += ["--cycles", "2", "--no-reference-check", "--strategy", strategy]
    with contextlib.suppress(SystemExit):
        main([*args, "--json", str(out)])
    wall = time.monotonic() - start
    (_, after_forked), after_fresh = _forked_cpu(), _children_cpu()
    summary = json.loads(out.read_text())["runs"][0]["summary"]
    return {
        "strategy": strategy,
        "wall_s": round(wall, 3),
        "worker_cpu_s": round(after_fresh - before_fresh + after_forked - before_forked, 3),
        "host_peak_x": summary["host_peak_x"],
        "steady_host_x": summary["steady_host_x"],
    }


def _spread(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    out = {}
    for name in STRATEGIES:
        values = [r[key] for r in rows if r["strategy"] == name]
        out[name] = round(max(values) - min(values), 4)
    return out


def _mean(rows: list[dict[str, Any]], key: str, name: str) -> float:
    values = [r[key] for r in rows if r["strategy"] == name]
    return round(sum(values) / len(values), 4)


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6, help="rows per mode (alternating)")
    parser.add_argument("--payload", default="8MiB")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    work = args.out.with_suffix(".work.json")
    names = [STRATEGIES[i % len(STRATEGIES)] for i in range(args.rows)]

    zygote._FAILED.append(True)  # fresh interpreters only
    fresh = [_one(name, args.payload, work) for name in names]
    zygote._FAILED.clear()
    zygote.expect(args.rows)
    started = time.monotonic()
    forked = [_one(name, args.payload, work) for name in names]
    zygote_own, _ = _forked_cpu()
    zygote.shutdown()
    work.unlink(missing_ok=True)

    result = {
        "benchmark": "zygote_rows",
        "date": dt.date.today().isoformat(),
        "machine": environment.machine(),
        "versions": environment.versions(),
        "payload": args.payload,
        "fresh": fresh,
        "forked": forked,
        "zygote_import_cpu_s": round(zygote_own, 3),
        "forked_since_s": round(time.monotonic() - started, 3),
        "fresh_spread": {k: _spread(fresh, k) for k in ("host_peak_x", "steady_host_x")},
        "difference": {
            key: {n: round(_mean(forked, key, n) - _mean(fresh, key, n), 4) for n in STRATEGIES}
            for key in ("host_peak_x", "steady_host_x")
        },
        "cpu_s": {
            "fresh_rows": round(sum(r["worker_cpu_s"] for r in fresh), 3),
            "forked_rows_plus_zygote": round(
                sum(r["worker_cpu_s"] for r in forked) + zygote_own, 3
            ),
        },
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("cpu_s", "fresh_spread", "difference")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main_())
