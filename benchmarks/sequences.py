"""GPU benchmark: every phase-sequence preset (``--sequence``) for ``lazy`` and for offload
functions in verl's shape, each an ``offloadprobe run`` in a fresh process (issue 24).

Rows, each run once per preset (``core.sequences.PRESETS``):

* ``lazy`` (parameters only) and ``lazy + complete`` (both parts move, so
  ``offload-optimizer-only`` moves something);
* verl-shaped functions after PR 6193 / 6635 (``tests/integration/verl_shaped.py``): the
  model pair over the chunk list, the optimizer pair ``@each`` over the one optimizer.

Plus one ``--workspace-cache 64MiB`` run of ``lazy`` (the fixed cycle): on a GPU the device
ledger must name the cache as unreferenced device memory made during train; and
``--ref-model --frozen-fraction 0.5`` for ``lazy + complete`` (every part moved bit for bit)
and for the verl-shaped pair (which branch per chunk as verl's do: DDP buffers, frozen
parameters, then the reference model parameter by parameter); and the same parts under
``double-offload``: a second ``.to("cpu")`` of a host tensor returns that tensor, and code
that frees the old storage after the move frees its only copy.

Per run: the verdict and exit code, the steps, and per step its phase, bytes moved,
host peak and host after over the pre-offload baseline, GPU allocated after, and every
audit after an offload step (what it left, what no part owns). Written to
``benchmarks/results/<machine>-<date>-sequences.json`` (rewritten after every run, so a
killed session keeps what finished) and a Markdown table beside it.

    python benchmarks/sequences.py --out benchmarks/results                 # on the H200
    python benchmarks/sequences.py --only lazy   # one row (the file is named by it)
    python benchmarks/sequences.py --device cpu --payload 16MiB --dry-run   # the commands
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # offloadprobe from this checkout

from offloadprobe.core.sequences import PRESETS  # noqa: E402

VERL = "tests.integration.verl_shaped"
ROWS: dict[str, list[str]] = {
    "lazy": ["--strategy", "lazy"],
    "lazy + complete": ["--strategy", "lazy", "--optimizer-strategy", "complete"],
    "verl post-#6193 + post-#6635": [
        "--strategy",
        f"{VERL}:offload_megatron_model_to_cpu,load_megatron_model_to_gpu",
        "--optimizer-strategy",
        f"{VERL}:offload_megatron_optimizer,load_megatron_optimizer@each",
    ],
}


def jobs(payload: str, device: str) -> list[tuple[str, str, list[str]]]:
    """(row, preset or ``workspace-cache``, ``offloadprobe run`` arguments)."""
    common = ["--device", device, "--payload", payload, "--no-progress"]
    out = [
        (row, preset, [*args, "--sequence", preset, *common])
        for row, args in ROWS.items()
        for preset in PRESETS
    ]
    out.append(
        (
            "lazy",
            "workspace-cache",
            ["--strategy", "lazy", "--workspace-cache", "64MiB", "--cycles", "2", *common],
        )
    )
    parts = ["--ref-model", "--frozen-fraction", "0.5", "--cycles", "2", *common]
    for row in ("lazy + complete", "verl post-#6193 + post-#6635"):
        out.append((row, "ref-model + frozen-fraction 0.5", [*ROWS[row], *parts]))
    twice = [*parts, "--sequence", "double-offload"]
    for row in ("lazy + complete", "verl post-#6193 + post-#6635"):
        out.append((row, "ref-model + frozen 0.5, double-offload", [*ROWS[row], *twice]))
    return out


def _steps(run: dict, baseline: int) -> list[dict]:
    steps = []
    for cycle in run.get("cycles", []):
        for p in cycle["phases"]:
            host = p["host"]
            before = host.get("group_before") or (
                host["rss_before"] - host["device_in_host_before"]
            )
            after = host.get("group_after") or (host["rss_after"] - host["device_in_host_after"])
            steps.append(
                {
                    "step": p["cycle"],
                    "phase": p["phase"],
                    "seconds": p["seconds"],
                    "bytes_moved": p["bytes_moved"],
                    "gbps": p["gbps"],
                    "host_before_over_baseline": before - baseline,
                    "host_after_over_baseline": after - baseline,
                    "host_peak_raw": host["peak"],
                    "gpu_allocated_after": (p.get("gpu") or {}).get("allocated_after"),
                    "device_used_after": (p.get("gpu") or {}).get("device_used_after"),
                    "left_on_device": p.get("left_on_device"),
                }
            )
    return sorted(steps, key=lambda s: s["step"])


def result_of(row: str, preset: str, args: list[str], doc: dict, rc: int, seconds: float) -> dict:
    (run,) = doc["runs"]
    return {
        "row": row,
        "preset": preset,
        "command": ["offloadprobe", "run", *args],
        "exit_code": rc,
        "verdict": run.get("verdict"),
        "outcome": run.get("outcome"),
        "sequence": run.get("sequence"),
        "payload_bytes": run["payload_bytes"],
        "summary": run.get("summary"),
        "residency": run.get("residency"),
        "integrity": run.get("integrity"),
        "notes": run.get("notes"),
        "steps": _steps(run, run["baseline_host_bytes"]),
        "wall_seconds": round(seconds, 1),
    }


def markdown(results: list[dict]) -> str:
    lines = [
        "| row | preset | exit | verdict | host peak | steady host |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r.get("summary") or {}
        peak = f"{s['host_peak_x']:.2f}x" if s.get("host_peak_x") is not None else "-"
        steady = f"{s['steady_host_x']:.2f}x" if s.get("steady_host_x") is not None else "-"
        verdict = (r.get("verdict") or "").replace("|", "/")
        lines.append(
            f"| {r['row']} | {r['preset']} | {r['exit_code']} | {verdict} | {peak} | {steady} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--payload", default="1GiB")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--machine", default="h200")
    parser.add_argument(
        "--only", action="append", choices=list(ROWS), help="run only this row (repeatable)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs of today's file that passed (exit 0) and run the others again",
    )
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    todo = [j for j in jobs(args.payload, args.device) if not args.only or j[0] in args.only]
    if args.dry_run:
        for row, preset, run_args in todo:
            print(f"{row} / {preset}: offloadprobe run {' '.join(run_args)}")
        return
    import torch

    from offloadprobe.core import environment

    args.out.mkdir(parents=True, exist_ok=True)
    day = dt.date.today().isoformat()
    names = re.sub(r"[^A-Za-z0-9]+", "-", "-".join(args.only or [])).strip("-")
    suffix = f"-{names}" if names else ""
    path = args.out / f"{args.machine}-{day}-sequences{suffix}.json"
    doc: dict = {
        "benchmark": "benchmarks/sequences.py",
        "argv": sys.argv,
        "versions": environment.versions(),
        "machine": environment.machine(),
        "cuda": torch.cuda.is_available(),
        "results": [],
    }
    finished = {}
    if args.resume and path.exists():  # a session cut short: its finished runs stand
        finished = {
            (r["row"], r["preset"]): r
            for r in json.loads(path.read_text())["results"]
            if r.get("exit_code") == 0
        }
    for index, (row, preset, run_args) in enumerate(todo):
        if (row, preset) in finished:
            doc["results"].append(finished[(row, preset)])
            continue
        out = args.out / f".sequences-{index}.json"
        cmd = [sys.executable, "-m", "offloadprobe", "run", *run_args, "--json", str(out)]
        print(f"[{index + 1}/{len(todo)}] {row} / {preset}", flush=True)
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=HERE.parent, check=False, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if not out.exists():
            doc["results"].append(
                {
                    "row": row,
                    "preset": preset,
                    "exit_code": proc.returncode,
                    "stderr_tail": proc.stderr[-2000:],
                    "command": cmd[3:],
                }
            )
        else:
            entry = result_of(
                row, preset, run_args, json.loads(out.read_text()), proc.returncode, seconds
            )
            doc["results"].append(entry)
            out.unlink()
            print(f"    exit {proc.returncode}: {entry['verdict']}", flush=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(doc["results"]))
    print(f"wrote {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    main()
