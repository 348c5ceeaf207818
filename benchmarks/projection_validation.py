"""Projection vs measurement: ``offloadprobe plan``'s host peak against ``offloadprobe run``.

For every strategy and payload, one fresh ``offloadprobe run --json`` child measures
``summary.host_peak_bytes`` (exact VmHWM over the host RSS before the first offload),
and ``offloadprobe.plan.probe.project_probe`` predicts it from the child's own model
shape, without running anything. Sizes just below and just above a power of two show
whether the projection follows PyTorch's pinned rounding (on CUDA: 1000 MiB rounds to
1 GiB, 1100 MiB to 2 GiB).

GPU (the default, about 2-3 minutes on one H200; children run three at a time, which
is safe: VmHWM is per process)::

    python benchmarks/projection_validation.py --out "$OUT/projection_validation.json"

CPU emulation (what tests/integration/test_projection_cpu.py runs)::

    python benchmarks/projection_validation.py --device cpu --sizes 48MiB 60MiB 68MiB \\
        --strategies naive lazy --cycles 2 --jobs 2

Writes one JSON document: every row's predicted and measured bytes and relative error,
and the torch / CUDA / megatron-core versions the children reported. Exit code 0 when
every row is within the tolerance, 1 otherwise (a failed child counts as outside).
Needs no network; only offloadprobe and its dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from offloadprobe.core.config import ModelConfig, RunConfig, size_for_payload  # noqa: E402
from offloadprobe.core.devices import guess_device  # noqa: E402
from offloadprobe.core.units import parse_size  # noqa: E402
from offloadprobe.isolation.rows import measure  # noqa: E402
from offloadprobe.plan.probe import probe_payload, project_probe  # noqa: E402

DEFAULT_SIZES = {"cuda": ["1000MiB", "1100MiB", "3GiB"], "cpu": ["48MiB", "60MiB", "68MiB"]}
DEFAULT_STRATEGIES = ["naive", "lazy", "registered"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One strategy at one payload: predicted vs measured host peak over the baseline."""

    strategy: str
    size: str
    """The ``--payload`` asked for."""
    payload_bytes: int | None
    """param_data bytes the child built (``offloadprobe run``'s payload)."""
    predicted_payload_bytes: int | None
    predicted_host_peak_bytes: int | None
    measured_host_peak_bytes: int | None
    relative_error: float | None
    """(measured - predicted) / predicted."""
    within_tolerance: bool
    exit_code: int
    wall_s: float
    error: str | None = None


def run_child(
    device: str, strategy: str, size: str, cycles: int, train_steps: int, timeout_s: float
) -> tuple[int, dict[str, Any] | None, str, float]:
    """One fresh ``offloadprobe run`` process; (exit code, JSON report, stderr tail, seconds)."""
    config = RunConfig(
        model=size_for_payload(ModelConfig(), parse_size(size)),
        strategy=strategy,
        device=device,
        cycles=cycles,
        train_steps=train_steps,
        reference_check=False,
    )
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    start = time.perf_counter()
    row = measure(
        config, device=guess_device(device), env={"PYTHONPATH": path}, timeout_s=timeout_s
    )
    outcome = row.outcome
    tail = outcome.stderr_tail or ("" if row.verdict.ok else row.verdict.line())
    report = row.report.to_dict() if outcome.report is not None else None
    return row.verdict.exit_code, report, tail, time.perf_counter() - start


def measure_row(
    device: str,
    strategy: str,
    size: str,
    cycles: int,
    train_steps: int,
    timeout_s: float,
    tolerance: float,
) -> tuple[Row, dict[str, Any] | None]:
    code, report, tail, seconds = run_child(device, strategy, size, cycles, train_steps, timeout_s)
    runs = (report or {}).get("runs") or []
    summary = runs[0].get("summary") if runs else None
    if code != 0 or summary is None:
        row = Row(
            strategy=strategy,
            size=size,
            payload_bytes=None,
            predicted_payload_bytes=None,
            predicted_host_peak_bytes=None,
            measured_host_peak_bytes=None,
            relative_error=None,
            within_tolerance=False,
            exit_code=code,
            wall_s=round(seconds, 2),
            error=tail or f"exit code {code}",
        )
        return row, report
    fields = ModelConfig.__dataclass_fields__
    model = ModelConfig(**{k: v for k, v in report["model"].items() if k in fields})
    predicted = project_probe(model, strategy, emulated=bool(report["emulated"]), cycles=cycles)
    measured = int(summary["host_peak_bytes"])
    error = (measured - predicted) / predicted if predicted else None
    row = Row(
        strategy=strategy,
        size=size,
        payload_bytes=int(report["payload_bytes"]),
        predicted_payload_bytes=probe_payload(model),
        predicted_host_peak_bytes=predicted,
        measured_host_peak_bytes=measured,
        relative_error=error,
        within_tolerance=error is not None and abs(error) <= tolerance,
        exit_code=code,
        wall_s=round(seconds, 2),
    )
    return row, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--sizes", nargs="+", help="payloads, e.g. 1000MiB 1100MiB 3GiB")
    parser.add_argument("--strategies", nargs="+", default=DEFAULT_STRATEGIES)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=3, help="children at a time")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per child")
    parser.add_argument(
        "--out", type=Path, help="JSON path (default $OUT/projection_validation.json)"
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or DEFAULT_SIZES[args.device]
    out = args.out or Path(os.environ.get("OUT", ".")) / "projection_validation.json"

    jobs = [(s, z) for z in sizes for s in args.strategies]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(
                measure_row,
                args.device,
                strategy,
                size,
                args.cycles,
                args.train_steps,
                args.timeout,
                args.tolerance,
            )
            for strategy, size in jobs
        ]
        results = [f.result() for f in futures]
    rows = [row for row, _ in results]
    reports = [r for _, r in results if r]
    errors = [abs(r.relative_error) for r in rows if r.relative_error is not None]
    doc = {
        "device": args.device,
        "emulated": reports[0]["emulated"] if reports else None,
        "versions": reports[0].get("versions") if reports else None,
        "machine": reports[0].get("machine") if reports else None,
        "cycles": args.cycles,
        "train_steps": args.train_steps,
        "tolerance": args.tolerance,
        "wall_s": round(time.perf_counter() - started, 1),
        "all_within_tolerance": all(r.within_tolerance for r in rows),
        "max_abs_relative_error": max(errors) if errors else None,
        "rows": [asdict(r) for r in rows],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    header = ("strategy", "size", "payload", "predicted", "measured", "error")
    print("{:<11} {:>8} {:>14} {:>14} {:>14} {:>8}".format(*header))
    for r in rows:
        if r.error:
            print(f"{r.strategy:<11} {r.size:>8} FAILED: {r.error}")
            continue
        sizes = (r.payload_bytes, r.predicted_host_peak_bytes, r.measured_host_peak_bytes)
        print(
            f"{r.strategy:<11} {r.size:>8} " + " ".join(f"{n:>14,}" for n in sizes),
            f"{100 * r.relative_error:>7.2f}%",
        )
    print(f"versions {doc['versions']}; wrote {out}; {doc['wall_s']} s")
    return 0 if doc["all_within_tolerance"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
