"""What ``offloadprobe attach`` costs: a wrapped call's overhead, ``offloadprobe.phase``
outside attach, and the bootstrap's start-up in each process. Torch-free.

1. Wrapped call: an offload-like call (``--mib`` MiB copied into a kept host buffer,
   page-touching, as a post-fix offload does) timed bare and through attach's wrapper
   under a real session (job file, stream, VmHWM reset, and the parent's meter: a
   thread of this process reading the process's own cgroup at each entry and exit), in
   shuffled rounds beside the bare call again (the noise floor); the overhead is the
   median difference, as a fraction of the bare call (target: at most 2%), and in
   microseconds per call; and the probe's own enter+exit cost (an empty call, many
   times) over the bare call, the steadier figure of the same fraction on a shared host.
2. ``offloadprobe.phase`` outside attach: ``with phase("x"): pass`` and a call of a
   ``@phase("x")`` function less a plain call, in nanoseconds (target: under 1 us).
3. Start-up: ``python -c pass`` with the bootstrap on PYTHONPATH and a job file, against
   without, median wall seconds over ``--startups`` runs each.

    python benchmarks/attach_overhead.py --json benchmarks/results/cpu-...-attach-overhead.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIB = 1024**2


def offload_like(src: bytearray, dst: bytearray) -> None:
    """A post-fix offload's host side: copy the device image into the kept buffer."""
    memoryview(dst)[:] = src


@contextlib.contextmanager
def _metered() -> Iterator[str]:
    """attach's parent side around this process: the job's cgroups (where they can be
    made; this process joins them, and leaves them again after) and the meter, as
    ``run_attached`` makes them; yields the meter's name."""
    from offloadprobe.attach.groups import JobGroups
    from offloadprobe.attach.meter import Meter
    from offloadprobe.measure.cgroup import home_procs

    name = f"offloadprobe-bench-{os.getpid()}"
    groups, _ = JobGroups.make(f"bench-{os.getpid()}")
    if groups is not None:
        groups.entry.write_text(str(os.getpid()))
    meter = Meter(name, groups=groups, member=lambda pid: True)
    meter.start()
    try:
        yield name
    finally:
        meter.stop()
        if groups is not None:
            home_procs(groups.job).write_text(str(os.getpid()))
            groups.close([])


def wrapped_overhead(mib: int, rounds: int, calls: int) -> dict:
    from offloadprobe.attach import protocol, runtime
    from offloadprobe.attach.wrap import make_wrapper

    with tempfile.TemporaryDirectory() as tmp, _metered() as meter:
        job = {
            "version": protocol.VERSION,
            "job_id": "bench",
            "out_dir": tmp,
            "phases": [],
            "meter": meter,
            "reset_gpu_peak": True,
        }
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        os.environ[protocol.JOB_ENV] = str(path)
        try:
            session = runtime.activate("benchmark")
            assert session is not None
            wrapped = make_wrapper(offload_like, "offload", "bench:offload_like")
            src, dst = bytearray(os.urandom(1024) * (mib * 1024)), bytearray(mib * MIB)
            variants = {"bare": offload_like, "bare_again": offload_like, "wrapped": wrapped}
            times: dict[str, list[float]] = {name: [] for name in variants}
            shuffle = random.Random(0).shuffle
            for _ in range(rounds):
                order = list(variants.items())
                shuffle(order)  # no variant always runs first in its round
                for name, fn in order:
                    start = time.perf_counter()
                    for _ in range(calls):
                        fn(src, dst)
                    times[name].append((time.perf_counter() - start) / calls)
            stream_lines = len(Path(session.stream.path).read_text().splitlines())
        finally:
            runtime.SESSION = None
            del os.environ[protocol.JOB_ENV]
    bare = statistics.median(times["bare"])
    wrap = statistics.median(times["wrapped"])
    diffs = [w - b for w, b in zip(times["wrapped"], times["bare"], strict=True)]
    noise = [a - b for a, b in zip(times["bare_again"], times["bare"], strict=True)]
    return {
        "call_mib": mib,
        "rounds": rounds,
        "calls_per_round": calls,
        "bare_call_s_median": bare,
        "wrapped_call_s_median": wrap,
        "overhead_us_per_call_median": statistics.median(diffs) * 1e6,
        "overhead_fraction_median": statistics.median(diffs) / bare,
        "noise_floor_us_bare_again_less_bare": statistics.median(noise) * 1e6,
        "target_fraction": 0.02,
        "records_written": stream_lines,
    }


def empty_wrapper_cost(number: int) -> dict:
    """The probe alone, on an empty function: the absolute cost per wrapped call."""
    from offloadprobe.attach import probe
    from offloadprobe.attach.meter_client import MeterClient

    def per_call(meter: MeterClient | None) -> float:
        calls = probe.CallProbe(meter=meter, reset_gpu_peak=True)

        def one() -> None:
            calls.exit(calls.enter("x", "t", 1), None)

        return min(timeit.repeat(one, number=number, repeat=5)) / number

    with _metered() as name:
        client = MeterClient(name)
        client.hello()
        metered = per_call(client)
    return {"probe_enter_exit_us": metered * 1e6, "probe_without_meter_us": per_call(None) * 1e6}


def phase_outside_attach(number: int) -> dict:
    import offloadprobe

    phase = offloadprobe.phase

    @phase("load")
    def decorated() -> None:
        return None

    def plain() -> None:
        return None

    def block() -> None:
        with phase("offload"):
            pass

    def best(fn) -> float:
        return min(timeit.repeat(fn, number=number, repeat=7)) / number

    empty = best(lambda: None)
    return {
        "with_phase_ns": (best(block) - empty) * 1e9,
        "decorated_call_less_plain_call_ns": (best(decorated) - best(plain)) * 1e9,
        "target_ns": 1000,
        "modules_imported_by_offloadprobe_phase": _phase_imports(),
    }


def _phase_imports() -> list[str]:
    """What ``import offloadprobe; offloadprobe.phase`` adds to a fresh interpreter."""
    code = (
        "import sys; before = set(sys.modules); import offloadprobe; offloadprobe.phase; "
        "new = sorted(set(sys.modules) - before); print(' '.join(new))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OFFLOADPROBE_JOB", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return out.stdout.split()


def startup(runs: int) -> dict:
    from offloadprobe.attach import protocol
    from offloadprobe.attach.run import BOOTSTRAP

    def median_wall(env: dict) -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    with tempfile.TemporaryDirectory() as tmp:
        job = {
            "version": protocol.VERSION,
            "job_id": "bench",
            "out_dir": tmp,
            "phases": [{"name": "x", "module": "m", "qualname": "f", "preset": None}],
            "meter": None,
            "reset_gpu_peak": True,
        }
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        bare = median_wall(base)
        attached = median_wall({**base, "PYTHONPATH": str(BOOTSTRAP), protocol.JOB_ENV: str(path)})
    return {
        "runs": runs,
        "python_c_pass_s": bare,
        "with_bootstrap_s": attached,
        "bootstrap_s": attached - bare,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--startups", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    doc = {
        "benchmark": "attach_overhead",
        "host": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "phase_outside_attach": phase_outside_attach(200_000),
        "probe_alone": empty_wrapper_cost(2000),
        "wrapped_call": [wrapped_overhead(m, args.rounds, args.calls) for m in args.mib],
        "startup": startup(args.startups),
    }
    probe_s = doc["probe_alone"]["probe_enter_exit_us"] / 1e6
    for row in doc["wrapped_call"]:
        # the paired difference is within the noise of a shared host; the probe's own
        # cost over the bare call is the steadier estimate of the same fraction
        row["overhead_fraction_from_probe_cost"] = probe_s / row["bare_call_s_median"]
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
