"""GPU benchmark (issue 26): ``hugepin``'s first offload against its settings.

Each row is one ``offloadprobe run --strategy hugepin --json`` child in a fresh process
(a first offload runs in exactly that state) with ``--strategy-option`` pairs from
``--grid`` (``registrars=1,2,4;threads=8,14``: every combination), its stage timings
(``stages=``) beside its rates. The first offload's target is 25 GB/s at 5 GiB; the
registering thread was the slowest stage on 2026-12-01 (24 GB/s inside the pipeline, 35
alone), which ``registrars`` (threads calling ``cudaHostRegister`` side by side) tests.

    python benchmarks/hugepin_sweep.py --out benchmarks/results
    python benchmarks/hugepin_sweep.py --grid 'registrars=1,2' --dry-run
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from first_offload import _env, _gbps, row, run_command  # noqa: E402

GRID = "registrars=1,2,4;threads=8,14"


def grid(text: str) -> list[dict[str, str]]:
    """Every combination of ``key=v1,v2;key2=...`` (one dict per row)."""
    axes = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, _, values = part.partition("=")
        if not key or not values:
            raise SystemExit(f"--grid: {part!r} is not key=v1,v2")
        axes.append([(key.strip(), v.strip()) for v in values.split(",") if v.strip()])
    return [dict(combo) for combo in itertools.product(*axes)]


def measure(options: dict[str, str], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    name = "-".join(f"{k}{v}" for k, v in options.items()) or "defaults"
    out, stages = tmp / f"{name}.json", tmp / f"stages-{name}.json"
    cmd = run_command("hugepin", args.size, args.cycles, out, args.device)
    for key, value in {**options, "stages": str(stages)}.items():
        cmd += ["--strategy-option", f"{key}={value}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=240)
    seconds = round(time.perf_counter() - start, 1)
    if not out.exists():
        return {"options": options, "error": proc.stderr[-2000:], "exit_code": proc.returncode}
    run = json.loads(out.read_text())["runs"][0]
    found = row("hugepin", args.size, run, seconds)
    keep = ("verdict", "first_offload_gbps", "steady_offload_gbps", "load_gbps", "host_peak_x")
    doc: dict[str, Any] = {"options": options, **{k: found.get(k) for k in keep}}
    doc["exit_code"], doc["versions"] = proc.returncode, found.get("versions")
    if stages.exists():
        first = json.loads(stages.read_text())["stages"][0]
        doc["first_offload_stages"] = first
        # over the summed thread-seconds: more registrars read lower when the driver
        # serialises them
        doc["first_register_gbps"] = _gbps(first["moved_bytes"], first["register_seconds"])
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--machine", default="h200")
    parser.add_argument("--size", default="5GiB")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--grid", default=GRID)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    rows = grid(args.grid)
    if args.dry_run:
        for options in rows:
            print(" ".join(run_command("hugepin", args.size, args.cycles, Path("OUT"))), options)
        return
    day = dt.date.today().isoformat()
    path = args.out.resolve() / f"{args.machine}-{day}-hugepin-sweep.json"
    doc: dict[str, Any] = {"benchmark": "hugepin_sweep", "date": day, "size": args.size}
    doc.update(command=" ".join(sys.argv), commit=args.commit, rows=[])
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for options in rows:
            doc["rows"].append(measure(options, args, Path(tmp)))
            path.write_text(json.dumps(doc, indent=1) + "\n")  # survives a kill
    for r in doc["rows"]:
        print(
            f"{r['options']!s:40} first {r.get('first_offload_gbps')} "
            f"register {r.get('first_register_gbps')} steady {r.get('steady_offload_gbps')} "
            f"peak {r.get('host_peak_x')} {r.get('verdict') or r.get('error', '')[-200:]}"
        )
    print("wrote", path)


if __name__ == "__main__":
    main()
