"""Benchmark: what the timeline sampler (``--trace``/``--plot``) adds to phase time.

One process, one model: train/offload/load phases timed by ``PhaseMeter`` with the
sampler off and on, alternating (off-on, on-off, ...) over several repetitions, so
drift and the other tenants of the machine hit both equally. Reported per phase: the
medians, the median of the paired differences (on - off, same repetition), and the
budget verdict: the sampler may add at most 2% to the summed phase time. Also the
cost of one read of every sampler source and the sampling rate reached in each phase.

    python benchmarks/sampler_overhead.py --payload 5GiB --device cuda --out RESULT.json
    python benchmarks/sampler_overhead.py --payload 24MiB --device cpu --out RESULT.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offloadprobe.core.config import ModelConfig, size_for_payload  # noqa: E402
from offloadprobe.core.units import parse_size  # noqa: E402
from offloadprobe.engine import environment  # noqa: E402
from offloadprobe.engine.model.builder import build_probe_model  # noqa: E402
from offloadprobe.engine.model.train import train_step  # noqa: E402
from offloadprobe.engine.runtime import open_runtime  # noqa: E402
from offloadprobe.engine.strategies import model_strategy  # noqa: E402
from offloadprobe.measure.meter import PhaseMeter  # noqa: E402
from offloadprobe.measure.sampler import default_sources, read_cost_ns, sampler_for  # noqa: E402

BUDGET = 0.02
SETTLE_S = 0.5
PHASES = ("train", "offload", "load")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload", default="24MiB")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--strategy", default="lazy")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE_S,
        help="Seconds between starting the sampler and the first phase.",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model_cfg = size_for_payload(
        ModelConfig(num_layers=args.layers, seq_length=32, micro_batch_size=1),
        parse_size(args.payload),
    )
    times: dict[str, dict[str, list[float]]] = {m: {p: [] for p in PHASES} for m in ("off", "on")}
    cpu: dict[str, dict[str, list[float]]] = {m: {p: [] for p in PHASES} for m in ("off", "on")}
    rates: dict[str, list[float]] = {}
    cpu_shares: list[str] = []
    notes: set[str] = set()
    load_before = os.getloadavg()
    with open_runtime(args.device, 1234) as runtime:
        model = build_probe_model(model_cfg, runtime, seed=1234)
        strategy = model_strategy(args.strategy).build(runtime)
        meter = PhaseMeter(runtime, arena=runtime.device_memory)
        cuda = not runtime.emulated
        costs = {}
        for source in default_sources(cuda):
            cost = read_cost_ns(source, reads=200)
            costs[", ".join(name for name, _ in source.series)] = cost / 1000

        def offload() -> None:
            strategy.offload(model.chunks)

        def load() -> None:
            strategy.load(model.chunks)

        actions = {"train": lambda: train_step(model), "offload": offload, "load": load}
        for _warm in range(2):
            for phase in PHASES:
                meter.measure(0, phase, actions[phase])
        for rep in range(args.repetitions):
            order = ("off", "on") if rep % 2 == 0 else ("on", "off")
            for mode in order:
                sampler = sampler_for(cuda).start() if mode == "on" else None
                # As in a run, where the sampler starts before the model is built, its rate
                # has settled before the first phase; the same pause without it keeps the
                # two modes alike.
                time.sleep(args.settle)
                meter.sampler = sampler
                for phase in PHASES:
                    cpu_start = time.process_time()
                    rec, _ = meter.measure(rep, phase, actions[phase])
                    cpu[mode][phase].append(time.process_time() - cpu_start)
                    times[mode][phase].append(rec.seconds)
                if sampler is not None:
                    timeline = sampler.stop()
                    notes.update(n for n in timeline.notes[1:] if "of one CPU" not in n)
                    cpu_shares.append(next((n for n in timeline.notes if "of one CPU" in n), ""))
                    for series in timeline.series:
                        rates.setdefault(series.name, []).append(
                            series.samples / (timeline.end_ns / 1e9)
                        )
                meter.sampler = None
        close = getattr(strategy, "close", None)
        if callable(close):
            close()
        device = runtime.device
    phases = {}
    for phase in PHASES:
        off, on = times["off"][phase], times["on"][phase]
        paired = [b - a for a, b in zip(off, on, strict=True)]
        relative = sorted((b - a) / a for a, b in zip(off, on, strict=True))
        quart = statistics.quantiles(relative, n=4) if len(relative) > 1 else [0.0, 0.0, 0.0]
        cpu_off, cpu_on = cpu["off"][phase], cpu["on"][phase]
        phases[phase] = {
            "paired_relative_quartiles": quart,
            "process_cpu_median_off_s": statistics.median(cpu_off),
            "process_cpu_median_on_s": statistics.median(cpu_on),
            "process_cpu_overhead": statistics.median(
                [(b - a) / a for a, b in zip(cpu_off, cpu_on, strict=True) if a > 0] or [0.0]
            ),
            "median_off_s": statistics.median(off),
            "median_on_s": statistics.median(on),
            "median_paired_difference_s": statistics.median(paired),
            "overhead": statistics.median(paired) / statistics.median(off),
            "off_s": off,
            "on_s": on,
        }  # fmt: skip
    total_off = sum(statistics.median(times["off"][p]) for p in PHASES)
    total_paired = sum(phases[p]["median_paired_difference_s"] for p in PHASES)
    result = {
        "benchmark": "sampler_overhead",
        "date": dt.date.today().isoformat(),
        "device": device,
        "payload": args.payload,
        "payload_bytes": model.payload_bytes,
        "strategy": args.strategy,
        "repetitions": args.repetitions,
        "settle_s": args.settle,
        "versions": environment.versions(),
        "machine": environment.machine(),
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpus": os.cpu_count(),
        "source_read_cost_us": costs,
        "reads_per_s_median": {k: statistics.median(v) for k, v in rates.items()},
        "sampler": "host and cgroup from a sidecar process, CUDA counters from a thread",
        "sampler_notes": sorted(notes),
        "sidecar_cpu_per_repetition": cpu_shares,
        "phases": phases,
        "overhead_total": total_paired / total_off,
        "budget": BUDGET,
    }
    quartiles = [phases[p]["paired_relative_quartiles"] for p in PHASES]
    spread = max(q[2] - q[0] for q in quartiles)
    if spread > 2 * BUDGET:
        result["within_budget"] = None
        result["verdict"] = (
            f"inconclusive: the on/off ratios' interquartile range reaches {spread:.0%}, "
            f"wider than twice the {BUDGET:.0%} budget (load average "
            f"{os.getloadavg()[0]:.0f} on {os.cpu_count()} CPUs)"
        )
    else:
        result["within_budget"] = total_paired / total_off <= BUDGET
        result["verdict"] = "within budget" if result["within_budget"] else "over budget"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for phase in PHASES:
        p = phases[phase]
        q1, _, q3 = p["paired_relative_quartiles"]
        print(f"{phase:8s} off {p['median_off_s']:.4f} s  on {p['median_on_s']:.4f} s  "
              f"paired {p['overhead']:+.2%} (quartiles of on/off - 1: {q1:+.1%} .. {q3:+.1%}); "
              f"process CPU {p['process_cpu_overhead']:+.2%}")  # fmt: skip
    print(f"total overhead {result['overhead_total']:+.2%}: {result['verdict']}")


if __name__ == "__main__":
    main()
