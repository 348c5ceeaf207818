"""Benchmark: every host figure of the same job, fresh interpreter against forked worker.

``zygote_rows.py`` compares the summaries (host peak and steady host, x of the bytes
moved): differences in absolute levels cancel there. This one runs the same ``run``
``--rounds`` times each way, alternating (fresh, forked, fresh, ...), and compares every
integer host figure of every phase row (RSS, anonymous and file RSS, the cgroup's
current, peak and anonymous charge, the group figures before and after) and the run's
baseline. A figure is flagged where the forked rows' mean differs from the fresh rows'
by more than ``max(--margin, 2 x the fresh rows' own spread)``.

    python benchmarks/zygote_fidelity.py --strategy naive --rounds 3 --out RESULT.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offloadprobe.cli import main  # noqa: E402
from offloadprobe.isolation import zygote  # noqa: E402

MiB = 2**20


def _figures(run: dict[str, Any]) -> dict[str, int]:
    found = {"baseline_host": run["baseline_host_bytes"]}
    found.update({k: run["summary"][k] for k in ("host_peak_bytes", "steady_host_bytes")})
    for phase in (p for c in run["cycles"] for p in c["phases"]):
        tag = f"{phase['cycle']}.{phase['phase']}"
        for part in ("host", "cgroup"):
            for key, value in (phase.get(part) or {}).items():
                if isinstance(value, int) and not isinstance(value, bool):
                    found[f"{tag}.{part}.{key}"] = value
    return found


def _forked_here() -> list[bool]:
    """Whether each worker since came from a zygote (``fork_worker`` is watched)."""
    seen: list[bool] = []
    real = zygote.fork_worker

    def watched(*args: Any) -> Any:
        made = real(*args)
        seen.append(made is not None)
        return made

    zygote.fork_worker = watched  # type: ignore[assignment]
    return seen


def _one(args: list[str], out: Path, fresh: bool) -> dict[str, int]:
    failed, running = zygote._FAILED, getattr(zygote, "_ZYGOTE", [])
    saved = list(failed), list(running)
    if fresh:  # the zygote's state kept aside: this worker is a fresh interpreter
        failed.append(True)
        running.clear()
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        main([*args, "--json", str(out)])
    failed[:], running[:] = saved
    return _figures(json.loads(out.read_text())["runs"][0])


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="naive")
    parser.add_argument("--payload", default="8MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--margin", type=float, default=1.0, help="MiB")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    run = ["run", "--device", "cpu", "--no-progress", "--payload", args.payload]
    run += ["--cycles", "2", "--no-reference-check", "--strategy", args.strategy]
    work = args.out.with_suffix(".work.json")
    forked_flags = _forked_here()
    zygote.expect(2)
    rows: dict[str, list[dict[str, int]]] = {"fresh": [], "forked": []}
    for _ in range(args.rounds):
        rows["fresh"].append(_one(run, work, fresh=True))
        rows["forked"].append(_one(run, work, fresh=False))
    work.unlink(missing_ok=True)
    if forked_flags[1::2] != [True] * args.rounds or any(forked_flags[::2]):
        raise SystemExit(f"the rows did not alternate fresh/forked: {forked_flags}")
    compared = {}
    for key in rows["fresh"][0]:
        fresh = [r[key] for r in rows["fresh"]]
        forked = [r.get(key, 0) for r in rows["forked"]]
        difference = (statistics.mean(forked) - statistics.mean(fresh)) / MiB
        spread = (max(fresh) - min(fresh)) / MiB
        compared[key] = {
            "fresh_mib": [round(v / MiB, 3) for v in fresh],
            "forked_mib": [round(v / MiB, 3) for v in forked],
            "difference_mib": round(difference, 3),
            "flagged": abs(difference) > max(args.margin, 2 * spread),
        }
    flagged = {k: v for k, v in compared.items() if v["flagged"]}
    args.out.write_text(json.dumps({"strategy": args.strategy, "figures": compared}, indent=2))
    print(json.dumps({"flagged": flagged, "compared": len(compared)}, indent=2))
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main_())
