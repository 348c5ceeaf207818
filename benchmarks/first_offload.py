"""GPU benchmark (issue 26): the first offload, every strategy side by side, and the
page-locking ceiling it runs against.

Rows: ``naive lazy registered pipelined tms mcore hugepin relock`` at 5 GiB and 12 GiB, 3
cycles, each an ``offloadprobe run --json`` child in a fresh process (a strategy's first
cycle runs in exactly that state). Components: first touch by page size, method and
thread count (fresh, just released, released and idle); ``cudaHostRegister`` of touched and
untouched memory by page size; the copy into registered memory: each case in a fresh
process of its own (``first_offload_components.py``).

``held_while_training_bytes`` is read from each run's record: the host RSS at the end of
each train phase after the first load (``host.rss_after``, less the emulated device bytes,
0 on CUDA) over the run's pre-offload baseline (``baseline_host_bytes``); the row gives the
largest and every one (``held_while_training_by_cycle``).

The whole run keeps to ``--budget-s`` (300 s): rows not started by then are recorded as
skipped; run the same command again to fill them in (rows already measured are kept).

    python benchmarks/first_offload.py --out benchmarks/results
    python benchmarks/first_offload.py --dry-run
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STRATEGIES = ["hugepin", "relock", "registered", "lazy", "pipelined", "mcore", "tms", "naive"]
"""In the order they run (the new ones first, the slowest last, within each size)."""
SIZES = ["5GiB", "12GiB"]
COMPONENTS = [
    "touch",
    "touched-huge",
    "untouched-huge",
    "touched-4k",
    "untouched-4k",
    "untouched-huge-parallel",
]
HELD_METHOD = (
    "host.group_after (the worker's cgroup, page cache out; else host.rss_after - "
    "host.device_in_host_after) of every train phase after the first load, less the run's "
    "baseline_host_bytes (on the same scale, before the first offload); the largest"
)
TARGETS = {
    "hugepin": {
        "first_offload_gbps": (">=", 25.0),
        "host_peak_x": ("<=", 1.02),
        "steady_offload_gbps": (">=", 52.0),
    },
    "relock": {"min_offload_gbps": (">=", 20.0), "held_while_training_x": ("<=", 0.01)},
}
"""At 5 GiB on the H200 (issue 26); held beyond metadata: at most 1% of the payload."""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_command(
    strategy: str, size: str, cycles: int, out: Path, device: str = "cuda"
) -> list[str]:
    flags = f"--strategy {strategy} --device {device} --payload {size} --cycles {cycles}"
    child = [sys.executable, "-W", "ignore", "-m", "offloadprobe", "run", *flags.split()]
    return [*child, "--no-reference-check", "--no-progress", "--json", str(out)]


def component_command(case: str, args: argparse.Namespace, out: Path) -> list[str]:
    size = args.touch_bytes if case == "touch" else args.component_bytes
    flags = f"--case {case} --bytes {size} --idle-seconds {args.idle_seconds}"
    return [
        sys.executable,
        str(HERE / "first_offload_components.py"),
        *flags.split(),
        "--out",
        str(out),
    ]


def _phases(run: dict, name: str) -> list[dict]:
    return [p for c in run.get("cycles") or [] for p in c["phases"] if p["phase"] == name]


def _held(host: dict) -> int:
    """Host bytes held at a phase's end on the baseline's scale: the worker's cgroup where
    it has one (page cache out), else the process's RSS less the emulated device."""
    if host.get("group_after") is not None:
        return host["group_after"]
    return host["rss_after"] - host.get("device_in_host_after", 0)


def held_while_training(run: dict) -> list[int]:
    """Host bytes over the baseline at the end of each train phase after the first load.

    On the baseline's own scale: the first run of 2026-12-01 took the process's RSS
    (with some 0.42 GiB of file-backed library pages) against the cgroup's baseline
    (page cache out), and read every row about 440 MiB high."""
    base = run.get("baseline_host_bytes") or 0
    trains = [p for p in _phases(run, "train") if p["cycle"] >= 1]
    return [_held(p["host"]) - base for p in trains]


def row(strategy: str, size: str, run: dict, seconds: float) -> dict[str, Any]:
    """One row from one run record (every figure the child measured)."""
    s = run.get("summary") or {}
    params = s.get("params") or {}
    held = held_while_training(run)
    payload = run.get("payload_bytes") or 0
    offloads = [p.get("gbps") for p in _phases(run, "offload")]
    last = (_phases(run, "offload") or [{}])[-1]
    torch_pinned = (last.get("pinned") or {}).get("reserved_after")
    pinned = s.get("pinned_reserved_bytes")
    return {
        "strategy": strategy,
        "size": size,
        "payload_bytes": payload,
        "verdict": run.get("verdict"),
        "failure": run.get("failure"),
        "first_offload_gbps": s.get("first_offload_gbps"),
        "steady_offload_gbps": s.get("offload_gbps"),
        "offload_gbps_by_cycle": offloads,
        "min_offload_gbps": min((g for g in offloads if g), default=None),
        "load_gbps": s.get("load_gbps"),
        "first_load_gbps": s.get("first_load_gbps"),
        "host_peak_x": params.get("host_peak_x", s.get("host_peak_x")),
        "steady_host_x": params.get("steady_host_x", s.get("steady_host_x")),
        "held_while_training_bytes": max(held) if held else None,
        "held_while_training_x": (max(held) / payload) if held and payload else None,
        "held_while_training_by_cycle": held,
        "pinned_reserved_bytes": pinned,
        "registered_bytes": None
        if pinned is None or torch_pinned is None
        else pinned - torch_pinned,
        "integrity_ok": s.get("integrity_ok"),
        "notes": run.get("notes"),
        "run_seconds": round(seconds, 1),
    }


def measure_row(
    strategy: str, size: str, args: argparse.Namespace, timeout: float, tmp: Path
) -> dict:
    out, stages = tmp / f"run-{strategy}-{size}.json", tmp / f"stages-{strategy}-{size}.json"
    env = _env()
    cmd = run_command(strategy, size, args.cycles, out, args.device)
    if strategy in ("hugepin", "relock"):
        cmd += ["--strategy-option", f"stages={stages}"]
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=ROOT, timeout=timeout, check=False, capture_output=True, text=True
        )
        code, tail = proc.returncode, (proc.stderr or proc.stdout)[-600:]
    except subprocess.TimeoutExpired:
        code, tail = None, f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    if not out.exists():
        return {
            "strategy": strategy,
            "size": size,
            "verdict": "no record",
            "exit_code": code,
            "error": tail,
            "run_seconds": round(seconds, 1),
        }
    doc = json.loads(out.read_text())
    found = row(strategy, size, doc["runs"][0], seconds)
    found["exit_code"], found["versions"], found["machine"] = (
        code,
        doc.get("versions"),
        doc.get("machine"),
    )
    if stages.exists():
        found["stages"] = json.loads(stages.read_text())  # the strategy's own clock
    if code:  # a run that failed keeps what it printed last (a worker's own error)
        found["output_tail"] = tail
    return found


def measure_component(case: str, args: argparse.Namespace, tmp: Path) -> dict:
    out = tmp / f"component-{case}.json"
    cmd = component_command(case, args, out)
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=_env(), cwd=ROOT, timeout=120, check=False, capture_output=True, text=True
        )
        error = None if out.exists() else (proc.stderr or proc.stdout)[-600:]
    except subprocess.TimeoutExpired:
        error = "timed out after 120 s"
    doc = json.loads(out.read_text()) if out.exists() else {"case": case, "error": error}
    doc["process_seconds"] = round(time.perf_counter() - start, 1)
    return doc


def ceiling(components: dict[str, dict]) -> dict[str, Any]:
    """The end-to-end ceiling of a first offload from the component rates: the stages
    overlap, so the slowest one bounds it; the serial sum bounds a pipeline without overlap."""
    touch = components.get("touch") or {}
    huge = [r for r in touch.get("rows", []) if r.get("huge") and r.get("fresh_gbps")]
    best = max(huge, key=lambda r: r["fresh_gbps"], default=None)
    chunked = (components.get("touched-huge") or {}).get("chunked") or {}
    stages = {
        "first touch, huge pages, fresh": best and best["fresh_gbps"],
        "first touch, huge pages, after release and idle": (touch.get("after_idle") or {}).get(
            "gbps"
        ),
        "cudaHostRegister, touched huge pages, 64 MiB chunks": chunked.get("register_gbps"),
        "cudaHostRegister while the pool touches another mapping": chunked.get(
            "register_while_touching_gbps"
        ),
        "D2H copy into registered memory": chunked.get("d2h_gbps"),
    }
    first = {k: v for k, v in stages.items() if "idle" not in k and v}
    later = {k: v for k, v in stages.items() if "fresh" not in k and v}
    for pipeline in (first, later):  # both touch and register at once, as measured
        if pipeline.get("cudaHostRegister while the pool touches another mapping"):
            pipeline.pop("cudaHostRegister, touched huge pages, 64 MiB chunks", None)

    def bound(rates: dict[str, float]) -> dict[str, Any]:
        if not rates:
            return {}
        name = min(rates, key=rates.get)
        serial = 1 / sum(1 / v for v in rates.values())
        return {"gbps": rates[name], "limited_by": name, "serial_gbps": round(serial, 2)}

    return {
        "stages_gbps": stages,
        "best_touch": best,
        "first_offload": bound(first),
        "relock_later_offloads": bound(later),
    }


def check_targets(rows: list[dict]) -> list[dict]:
    found = []
    for strategy, wanted in TARGETS.items():
        r = next(
            (
                r
                for r in rows
                if r["strategy"] == strategy and r["size"] == "5GiB" and "skipped" not in r
            ),
            None,
        )
        for key, (op, limit) in wanted.items():
            value = None if r is None else r.get(key)
            met = None if value is None else (value >= limit if op == ">=" else value <= limit)
            found.append(
                {
                    "strategy": strategy,
                    "size": "5GiB",
                    "figure": key,
                    "target": f"{op} {limit}",
                    "measured": value,
                    "met": met,
                }
            )
    return found


LINK_GBPS = 55.0
"""The D2H copy into registered memory on the H200 (components: 55.0-55.3 GB/s)."""


def _gbps(nbytes: int, seconds: float) -> float | None:
    return round(nbytes / seconds / 1e9, 2) if seconds > 0 else None


def first_offload_limit(row: dict[str, Any]) -> dict[str, Any] | None:
    """Where a pipeline row's first offload went, from its own stage record: the phase's
    seconds, the wait before its first copy (the first chunk touched and registered), and
    each stage's rate inside the pipeline (bytes over the stage's seconds; touching and
    registering are summed over their threads, so their wall rates are that times the
    threads). The slowest stage over every chunk but the first (the wait holds that one)
    plus the wait bounds it."""
    record = row.get("stages") or {}
    stages = (record.get("stages") or [None])[0]
    if not stages or stages.get("phase") != "offload" or not stages.get("locked_bytes"):
        return None
    nbytes, threads = stages["locked_bytes"], max(1, stages["threads"])
    registrars = max(1, (record.get("settings") or {}).get("registrars") or 1)
    wait_s = stages.get("first_copy_seconds") or 0.0
    register = "one thread" if registrars == 1 else f"{registrars} threads"
    rates = {
        f"cudaHostRegister ({register})": _gbps(nbytes, stages["register_seconds"] / registrars),
        f"first touch ({threads} threads)": _gbps(nbytes, stages["touch_seconds"] / threads),
        "D2H copy": LINK_GBPS,
    }
    slowest = min(rates, key=lambda k: rates[k] or float("inf"))
    after_first = nbytes - (nbytes // stages["chunks"] if stages.get("chunks") else 0)
    rate = rates[slowest]
    bound = _gbps(nbytes, after_first / (rate * 1e9) + wait_s) if rate else None
    return {
        "phase_seconds": round(stages["seconds"], 4),
        "first_copy_wait_seconds": round(wait_s, 4),
        "stage_gbps_in_pipeline": rates,
        "limited_by": slowest,
        "bound_gbps": bound,
        "measured_gbps": _gbps(nbytes, stages["seconds"]),
    }


def explain(rows: list[dict], targets: list[dict]) -> list[dict]:
    """For every first-offload target not met: the row's measured limit."""
    out = []
    for t in targets:
        if t["met"] is not False or t["figure"] != "first_offload_gbps":
            continue
        row = next(
            (r for r in rows if r["strategy"] == t["strategy"] and r["size"] == t["size"]), {}
        )
        limit = first_offload_limit(row)
        if limit is not None:
            out.append({"strategy": t["strategy"], "size": t["size"], **limit})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--machine", default="h200")
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--components", default=",".join(COMPONENTS))
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--touch-bytes", default="2GiB")
    parser.add_argument("--component-bytes", default="5GiB")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--commit", default=None, help="The commit measured, for the record.")
    parser.add_argument("--device", default="cuda", help="cpu: the plumbing only (emulation)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()
    begin = time.perf_counter()
    sizes = [s for s in args.sizes.split(",") if s]
    strategies = [s for s in args.strategies.split(",") if s]
    cases = [c for c in args.components.split(",") if c]
    if args.device == "cpu":
        cases = [c for c in cases if c == "touch"]
    day = dt.date.today().isoformat()
    path = args.out.resolve() / f"{args.machine}-{day}-first-offload.json"
    if args.dry_run:
        for case in cases:
            print(" ".join(component_command(case, args, Path("OUT.json"))))
        for size in sizes:
            for strategy in strategies:
                cmd = run_command(strategy, size, args.cycles, Path("OUT.json"), args.device)
                print(" ".join(cmd))
        return
    old = json.loads(path.read_text()) if path.exists() else {}
    done = {
        (r["strategy"], r["size"]): r
        for r in old.get("rows", [])
        if "skipped" not in r and "error" not in r
    }
    asked = {(strategy, size) for size in sizes for strategy in strategies}
    kept = [r for r in old.get("rows", []) if (r["strategy"], r["size"]) not in asked]
    """Rows of the file this call does not ask for (``--strategies``, ``--sizes``): kept."""
    components = {k: v for k, v in (old.get("components") or {}).items() if "error" not in v}
    doc: dict[str, Any] = {
        "benchmark": "first_offload",
        "date": day,
        "command": " ".join(sys.argv),
        "commit": args.commit,
        "cycles": args.cycles,
        "held_while_training_method": HELD_METHOD,
        "budget_s": args.budget_s,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            if case not in components:
                components[case] = measure_component(case, args, Path(tmp))
        rows = []
        for size in sizes:
            for strategy in strategies:
                left = args.budget_s - (time.perf_counter() - begin)
                if (strategy, size) in done:
                    rows.append(done[(strategy, size)])
                elif strategy == "tms" and importlib.util.find_spec("torch_memory_saver") is None:
                    rows.append(
                        {
                            "strategy": strategy,
                            "size": size,
                            "skipped": "torch_memory_saver is not installed "
                            "(pip install 'offloadprobe[tms]')",
                        }
                    )
                elif left < 20:
                    rows.append(
                        {
                            "strategy": strategy,
                            "size": size,
                            "skipped": f"time budget of {args.budget_s:.0f} s reached; "
                            "run the same command again to measure it",
                        }
                    )
                else:  # a row started may overrun the budget by a minute at most
                    timeout = min(180.0, max(left, 60.0))
                    found = measure_row(strategy, size, args, timeout, Path(tmp))
                    rows.append({**found, "commit": args.commit})  # kept rows keep theirs
                doc.update(rows=rows + kept, components=components)
                path.write_text(json.dumps(doc, indent=1) + "\n")  # survives a kill
    rows += kept
    measured = [r for r in rows if r.get("versions")]
    doc["versions"] = measured[0]["versions"] if measured else old.get("versions")
    doc["machine"] = measured[0]["machine"] if measured else old.get("machine")
    for r in rows:
        r.pop("versions", None), r.pop("machine", None)
    doc["ceiling"] = ceiling(components)
    doc["targets"] = check_targets(rows)
    doc["limits"] = explain(rows, doc["targets"])
    doc["wall_seconds"] = round(time.perf_counter() - begin, 1)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        if "skipped" in r:
            print(f"{r['strategy']:10} {r['size']:6} skipped: {r['skipped']}")
            continue
        print(
            f"{r['strategy']:10} {r['size']:6} {r.get('verdict')!s:10} "
            f"first {r.get('first_offload_gbps')} steady {r.get('steady_offload_gbps')} "
            f"load {r.get('load_gbps')} peak {r.get('host_peak_x')} "
            f"held {r.get('held_while_training_bytes')} ({r.get('run_seconds')} s)"
        )
    summary = {"ceiling": doc["ceiling"], "targets": doc["targets"], "limits": doc["limits"]}
    print(json.dumps(summary, indent=1))
    print("wrote", path, f"in {doc['wall_seconds']} s")


if __name__ == "__main__":
    main()
