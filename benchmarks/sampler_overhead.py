"""Benchmark: what the timeline sampler (``--trace``/``--plot``) adds to phase time.

One process, one model: train, offload and load phases timed by ``PhaseMeter`` (the
records' seconds: the measured phases only, not start-up), with the sampler off and on
in interleaved pairs (off-on, on-off, off-on, ...), so that drift and the machine's
other tenants hit both modes alike. Per pair, the overhead is the on/off ratio of the
summed phase time, minus one. Reported: the median over pairs with a 95% bootstrap
confidence interval (resampling pairs), the same per phase, the ratio of the summed
times with its interval, and the verdict against the 2% budget *from the interval*:
within budget if its upper end is at most 2%, over budget if its lower end exceeds 2%,
else inconclusive. Also: the load average before, during and after, the cost of one
read of every sampler source, the sampling rate reached and the share of phase time
the sampler spent in gaps (waiting for a CPU, at its lowest priority).

    python benchmarks/sampler_overhead.py --device cpu --payload 128MiB --out RESULT.json
    python benchmarks/sampler_overhead.py --device cuda --payload 5GiB --out RESULT.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offloadprobe.core import environment  # noqa: E402
from offloadprobe.core.config import ModelConfig, size_for_payload  # noqa: E402
from offloadprobe.core.units import parse_size  # noqa: E402
from offloadprobe.engine.model.builder import build_probe_model  # noqa: E402
from offloadprobe.engine.model.train import train_step  # noqa: E402
from offloadprobe.engine.runtime import open_runtime  # noqa: E402
from offloadprobe.engine.strategies import model_strategy  # noqa: E402
from offloadprobe.measure.meter import PhaseMeter  # noqa: E402
from offloadprobe.measure.sampler import default_sources, read_cost_ns, sampler_for  # noqa: E402
from offloadprobe.measure.timeline import Timeline  # noqa: E402

BUDGET = 0.02
SETTLE_S = 0.3
PHASES = ("train", "offload", "load")
RESAMPLES = 10_000
CONFIDENCE = 0.95


def bootstrap_median(values: list[float], seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (pairs resampled with replacement)."""
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    return medians[int(tail * RESAMPLES)], medians[int((1 - tail) * RESAMPLES) - 1]


def decile(values: list[float]) -> float:
    """The fastest tenth's upper bound (the minimum below ten values)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 10]


def bootstrap_ratio(
    off: list[float], on: list[float], seed: int, of: Callable[[list[float]], float] = sum
) -> tuple[float, float]:
    """Percentile bootstrap interval of of(on) / of(off) - 1, pairs kept together."""
    rng = random.Random(seed)
    n = len(off)
    ratios = []
    for _ in range(RESAMPLES):
        picks = rng.choices(range(n), k=n)
        ratios.append(of([on[i] for i in picks]) / of([off[i] for i in picks]) - 1)
    ratios.sort()
    tail = (1 - CONFIDENCE) / 2
    return ratios[int(tail * RESAMPLES)], ratios[int((1 - tail) * RESAMPLES) - 1]


def verdict(low: float, high: float) -> str:
    if high <= BUDGET:
        return "within budget"
    if low > BUDGET:
        return "over budget"
    return "inconclusive"


def paired(off: list[float], on: list[float], seed: int) -> dict:
    """Median per-pair overhead with its interval, and the ratio of sums with its own."""
    relative = [b / a - 1 for a, b in zip(off, on, strict=True)]
    low, high = bootstrap_median(relative, seed)
    ratio_low, ratio_high = bootstrap_ratio(off, on, seed)
    fast_low, fast_high = bootstrap_ratio(off, on, seed, of=decile)
    return {
        "median_off_s": statistics.median(off),
        "median_on_s": statistics.median(on),
        "overhead_median": statistics.median(relative),
        "overhead_median_ci95": [low, high],
        "overhead_of_sums": sum(on) / sum(off) - 1,
        "overhead_of_sums_ci95": [ratio_low, ratio_high],
        "relative_quartiles": statistics.quantiles(relative, n=4),
        # Other tenants only add time: the fastest tenth of each mode is the least
        # disturbed. A second view on a busy machine; the verdict is the median's.
        "overhead_fastest_decile": decile(on) / decile(off) - 1,
        "overhead_fastest_decile_ci95": [fast_low, fast_high],
        "off_s": off,
        "on_s": on,
    }


def gap_share(timeline: Timeline) -> dict[str, float]:
    """Per phase: the share of its time in which the sampler took no sample."""
    out: dict[str, list[float]] = {}
    for span in timeline.spans:
        covered = sum(
            max(0, min(g.end_ns, span.end_ns) - max(g.start_ns, span.start_ns))
            for g in timeline.gaps
        )
        out.setdefault(span.phase, []).append(covered / max(1, span.end_ns - span.start_ns))
    return {phase: statistics.mean(v) for phase, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload", default="128MiB")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--strategy", default="lazy")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=40, help="Off/on pairs.")
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE_S,
        help="Seconds between starting the sampler (or not) and the first phase.",
    )
    parser.add_argument("--warmup", type=int, default=2, help="Untimed cycles first.")
    parser.add_argument("--seed", type=int, default=1234, help="Bootstrap seed.")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    began = time.monotonic()
    model_cfg = size_for_payload(
        ModelConfig(num_layers=args.layers, seq_length=32, micro_batch_size=1),
        parse_size(args.payload),
    )
    times = {m: {p: [] for p in PHASES} for m in ("off", "on")}
    cpu = {m: {p: [] for p in PHASES} for m in ("off", "on")}
    rates: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {p: [] for p in PHASES}
    sampler_notes: list[str] = []
    loads = [os.getloadavg()]
    with open_runtime(args.device, 1234) as runtime:
        model = build_probe_model(model_cfg, runtime, seed=1234)
        strategy = model_strategy(args.strategy).build(runtime)
        meter = PhaseMeter(runtime, arena=runtime.device_memory)
        cuda = not runtime.emulated
        costs = {}
        for source in default_sources(cuda):
            cost = read_cost_ns(source, reads=200)
            costs[", ".join(name for name, _ in source.series)] = cost / 1000
        actions = {
            "train": lambda: train_step(model),
            "offload": lambda: strategy.offload(model.chunks),
            "load": lambda: strategy.load(model.chunks),
        }
        for _warm in range(args.warmup):
            for phase in PHASES:
                meter.measure(0, phase, actions[phase])
        # The imported modules' objects need no collecting: frozen, the meter's gc.collect
        # between phases takes milliseconds instead of 0.2 s (outside the timed phases).
        gc.freeze()
        for rep in range(args.repetitions):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                sampler = sampler_for(cuda).start() if mode == "on" else None
                # As in a run, where the sampler starts before the model is built; the
                # same pause without it keeps the two modes alike.
                time.sleep(args.settle)
                meter.sampler = sampler
                for phase in PHASES:
                    cpu_start = time.process_time()
                    rec, _ = meter.measure(rep, phase, actions[phase])
                    cpu[mode][phase].append(time.process_time() - cpu_start)
                    times[mode][phase].append(rec.seconds)
                meter.sampler = None
                if sampler is not None:
                    timeline = sampler.stop()
                    sampler_notes.append(timeline.notes[-1])
                    for phase, share in gap_share(timeline).items():
                        gaps[phase].append(share)
                    for series in timeline.series:
                        rates.setdefault(series.name, []).append(
                            series.samples / (timeline.end_ns / 1e9)
                        )
            if rep % 10 == 9:
                loads.append(os.getloadavg())
        close = getattr(strategy, "close", None)
        if callable(close):
            close()
        device = runtime.device
    loads.append(os.getloadavg())
    total_off = [sum(x) for x in zip(*(times["off"][p] for p in PHASES), strict=True)]
    total_on = [sum(x) for x in zip(*(times["on"][p] for p in PHASES), strict=True)]
    total = paired(total_off, total_on, args.seed)
    phases = {}
    for phase in PHASES:
        phases[phase] = paired(times["off"][phase], times["on"][phase], args.seed)
        # The measured process's own CPU seconds: work the sampler adds inside it (the
        # CUDA thread), apart from any wait for a CPU.
        own = paired(cpu["off"][phase], cpu["on"][phase], args.seed)
        phases[phase]["process_cpu"] = {
            k: own[k]
            for k in ("median_off_s", "median_on_s", "overhead_median", "overhead_median_ci95")
        }
        phases[phase]["sampler_gap_share_median"] = statistics.median(gaps[phase])
    low, high = total["overhead_median_ci95"]
    result = {
        "benchmark": "sampler_overhead",
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", "benchmarks/sampler_overhead.py", *sys.argv[1:]]),
        "runtime_s": round(time.monotonic() - began, 1),
        "device": device,
        "payload": args.payload,
        "payload_bytes": model.payload_bytes,
        "strategy": args.strategy,
        "pairs": args.repetitions,
        "order": "interleaved: off-on, on-off, ... (one pair per repetition)",
        "settle_s": args.settle,
        "warmup_cycles": args.warmup,
        "versions": environment.versions(),
        "machine": environment.machine(),
        "load_average_before_during_after": loads,
        "load_note": "1-, 5- and 15-minute load averages; other tenants may share the CPUs",
        "source_read_cost_us": costs,
        "reads_per_s_median": {k: statistics.median(v) for k, v in rates.items()},
        "sampler": "host and cgroup from a sidecar process at the lowest CPU priority, "
        "CUDA counters from a thread",
        "sampler_notes": sampler_notes,
        "budget": BUDGET,
        "statistic": f"median over pairs of (on/off - 1) of the summed phase time, "
        f"{CONFIDENCE:.0%} percentile bootstrap interval ({RESAMPLES} resamples of pairs)",
        "total": total,
        "phases": phases,
        "overhead": total["overhead_median"],
        "overhead_ci95": [low, high],
        "verdict": verdict(low, high),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, p in [*phases.items(), ("total", total)]:
        lo, hi = p["overhead_median_ci95"]
        extra = ""
        if name in phases:
            extra = (
                f"  own CPU {phases[name]['process_cpu']['overhead_median']:+.1%}, "
                f"sampler gaps {phases[name]['sampler_gap_share_median']:.0%}"
            )
        print(
            f"{name:8s} off {p['median_off_s']:.3f} s  on {p['median_on_s']:.3f} s  "
            f"overhead {p['overhead_median']:+.2%} [{lo:+.2%}, {hi:+.2%}]{extra}"
        )
    print(
        f"total overhead {result['overhead']:+.2%}, 95% CI [{low:+.2%}, {high:+.2%}] "
        f"against the {BUDGET:.0%} budget: {result['verdict']}"
    )
    print(
        f"{result['runtime_s']:.0f} s; load average {loads[0][0]:.1f} before, "
        f"{loads[-1][0]:.1f} after"
    )


if __name__ == "__main__":
    main()
