"""GPU benchmark (issue 38): ``hugepin`` and ``relock`` against the bare pipeline
(``bare_pipeline.py``), interleaved in rounds on one machine, each run a fresh process,
so every first-offload figure is a ratio measured side by side; then the limit study, one
stage of the bare pipeline changed at a time.

Before the first round one process first-touches ``--warm`` bytes of host memory and
gives them back, with the guest's MemTotal read before and after: a lent machine is a
Firecracker VM whose memory is plugged in as it is first used (KINDS.md: about 3 s for
each 8 GiB), and the first row of a fresh machine would otherwise pay that alone. Its
rate is kept as a limit of its own (``vm_first_touch``).

Rows: each round runs ``--items`` in order (``pipeline`` is the bare pipeline,
``pipeline-ramp`` the same with 4 MiB first chunks doubling to 64; anything
else is an ``offloadprobe run`` strategy, with ``name:key=value+...`` for its
``--strategy-option`` pairs), at ``--size``, ``--cycles`` cycles, through
``first_offload.measure_row``. Each strategy row's ratio is its first offload over the
same round's pipeline.

    python benchmarks/first_offload_rounds.py --out benchmarks/results --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import first_offload  # noqa: E402  (a sibling script: its row reader and run command)

ITEMS = "pipeline,hugepin,relock,pipeline-ramp"
PIPELINES = {"pipeline": [], "pipeline-ramp": ["--first-chunk-mib", "4"]}
"""The bare pipeline as issue 38 describes it, and with the ramp ``hugepin`` now has (its
first chunks 4 MiB, doubling to 64): the strongest bare reference measured."""
VARIANTS = {
    "memset-12": [],
    "populate-12": ["--touch", "populate"],
    "memset-14": ["--threads", "14"],
    "memset-8": ["--threads", "8"],
    "no-faults": ["--touch", "resident"],
    "no-copy": ["--no-copy"],
    "4k-pages": ["--huge", "0"],
    "register-256mib": ["--register-mib", "256"],
    "register-1gib": ["--register-mib", "1024"],
    "two-mappings-two-registrars": ["--registrars", "2"],
    "ramp-4mib": ["--first-chunk-mib", "4"],
    "chunk-32mib": ["--chunk-mib", "32"],
    "chunk-128mib": ["--chunk-mib", "128"],
}
"""The limit study: each changes one stage of the bare pipeline (memset, 12 threads,
64 MiB chunks, one registering thread, huge pages)."""
TARGETS = {
    "hugepin": {"ratio": 0.95, "host_peak_x": 1.02, "steady_offload_gbps": 52.0},
    "relock": {"ratio": 0.95, "host_peak_x": 1.02, "held_while_training_x": 0.01},
}


def pipeline_command(size: str, out: Path, extra: list[str]) -> list[str]:
    script = str(HERE / "bare_pipeline.py")
    return [sys.executable, "-W", "ignore", script, "--bytes", size, "--json", str(out), *extra]


def run_pipeline(size: str, tmp: Path, name: str, extra: list[str]) -> dict[str, Any]:
    out = tmp / f"pipeline-{name}-{time.monotonic_ns()}.json"
    cmd = pipeline_command(size, out, extra)
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    if not out.exists():
        return {"item": "pipeline", "variant": name, "error": (proc.stderr or proc.stdout)[-800:]}
    doc = json.loads(out.read_text())
    return {
        "item": "pipeline",
        "variant": name,
        **doc,
        "exit_code": proc.returncode,
        "run_seconds": round(time.perf_counter() - start, 1),
    }


def run_strategy(item: str, size: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    name, _, opts = item.partition(":")
    ns = argparse.Namespace(cycles=args.cycles, device=args.device)
    extra = [f"--strategy-option={o}" for o in opts.split("+") if o]
    original = first_offload.run_command

    def command(strategy: str, sz: str, cycles: int, out: Path, device: str = "cuda") -> list[str]:
        return original(strategy, sz, cycles, out, device) + extra

    first_offload.run_command = command  # the same child, with this item's options
    try:
        found = first_offload.measure_row(name, size, ns, 240.0, tmp)
    finally:
        first_offload.run_command = original
    found["item"] = item
    return found


def warm_vm(nbytes: str, threads: int) -> dict[str, Any]:
    """First-touch ``nbytes`` in a fresh process and give it back: the VM plugs memory."""
    code = (
        "import ctypes,mmap,time,json,sys;from concurrent.futures import ThreadPoolExecutor\n"
        "n=int(sys.argv[1]);t=int(sys.argv[2]);libc=ctypes.CDLL('libc.so.6')\n"
        "libc.mmap.restype=ctypes.c_void_p\n"
        "libc.mmap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_int,ctypes.c_int,"
        "ctypes.c_int,ctypes.c_long]\n"
        "libc.memset.argtypes=[ctypes.c_void_p,ctypes.c_int,ctypes.c_size_t]\n"
        "mem=lambda:int(open('/proc/meminfo').readline().split()[1])*1024\n"
        "before=mem();a=libc.mmap(None,n,3,0x22,-1,0);s=n//t;t0=time.perf_counter()\n"
        "list(ThreadPoolExecutor(t).map(lambda i:libc.memset(a+i*s,1,s),range(t)))\n"
        "dt=time.perf_counter()-t0\n"
        "print(json.dumps({'bytes':n,'threads':t,'seconds':round(dt,3),"
        "'gbps':round(n/dt/1e9,2),'mem_total_before':before,'mem_total_after':mem()}))\n"
    )
    nb = first_offload_size(nbytes)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(nb), str(threads)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (proc.stderr or proc.stdout)[-800:]}


def first_offload_size(text: str) -> int:
    units = {"GiB": 2**30, "MiB": 2**20}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def judge(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each strategy row of each round against its targets and that round's pipeline."""
    out = []
    for number, rows in enumerate(rounds):
        base = next((r for r in rows if r.get("item") == "pipeline" and "error" not in r), None)
        ramp = next((r for r in rows if r.get("item") == "pipeline-ramp" and "error" not in r), {})
        for r in rows:
            name = str(r.get("item", "")).partition(":")[0]
            if name not in TARGETS or r.get("item") != name:
                continue
            want = TARGETS[name]
            first = r.get("first_offload_gbps")
            ratio = first / base["first_offload_gbps"] if first and base else None
            checks = {"ratio": (ratio, ">=", want["ratio"])}
            for key in ("host_peak_x", "steady_offload_gbps", "held_while_training_x"):
                if key in want:
                    checks[key] = (r.get(key), ">=" if key.endswith("gbps") else "<=", want[key])
            out.append(
                {
                    "round": number + 1,
                    "strategy": name,
                    "pipeline_first_gbps": base and base["first_offload_gbps"],
                    "pipeline_ramp_first_gbps": ramp.get("first_offload_gbps"),
                    "ratio_to_pipeline_ramp": first / ramp["first_offload_gbps"]
                    if first and ramp.get("first_offload_gbps")
                    else None,
                    "first_offload_gbps": first,
                    "checks": {
                        k: {
                            "measured": v,
                            "target": f"{op} {lim}",
                            "met": None if v is None else (v >= lim if op == ">=" else v <= lim),
                        }
                        for k, (v, op, lim) in checks.items()
                    },
                }
            )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--machine", default="h200")
    p.add_argument("--size", default="5GiB")
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--items", default=ITEMS)
    p.add_argument("--variants", default=",".join(VARIANTS), help="'' for none")
    p.add_argument("--variant-repeats", type=int, default=1)
    p.add_argument("--warm", default="24GiB", help="'0' to skip the VM's first touch")
    p.add_argument("--name", default="first-offload-rounds")
    p.add_argument("--first-process", type=int, default=1, help="0: no pipeline before round 1")
    p.add_argument("--commit", default=None)
    p.add_argument("--device", default="cuda", help="cpu: the plumbing only (emulation)")
    args = p.parse_args()
    begin = time.perf_counter()
    day = dt.date.today().isoformat()
    path = args.out.resolve() / f"{args.machine}-{day}-{args.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "benchmark": "first_offload_rounds",
        "date": day,
        "command": " ".join(sys.argv),
        "commit": args.commit,
        "size": args.size,
        "cycles": args.cycles,
    }
    if args.warm != "0":
        doc["vm_first_touch"] = warm_vm(args.warm, 16)
        doc["vm_second_touch"] = warm_vm(args.warm, 16)
        print("vm", doc["vm_first_touch"], doc["vm_second_touch"], flush=True)
    items = [i for i in args.items.split(",") if i]
    rounds: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.first_process:  # the call's first CUDA process, kept apart from the rounds
            doc["first_process_pipeline"] = run_pipeline(args.size, Path(tmp), "first", [])
            print("first process", doc["first_process_pipeline"].get("first_offload_gbps"))
        for number in range(args.rounds):
            rows = []
            for item in items:
                if item in PIPELINES:
                    row = run_pipeline(args.size, Path(tmp), item, PIPELINES[item])
                    row["item"] = item
                else:
                    row = run_strategy(item, args.size, args, Path(tmp))
                row["round"] = number + 1
                for key in ("versions", "machine"):
                    found = row.pop(key, None)
                    if found and not doc.get(key):
                        doc[key] = found
                rows.append(row)
                print(
                    f"round {number + 1} {item:24} first {row.get('first_offload_gbps')} "
                    f"steady {row.get('steady_offload_gbps')} peak {row.get('host_peak_x')}"
                    f" held {row.get('held_while_training_x')}",
                    flush=True,
                )
            rounds.append(rows)
            doc["rounds"] = rounds
            path.write_text(json.dumps(doc, indent=1) + "\n")  # survives a kill
        variants = [v for v in args.variants.split(",") if v]
        study: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.variant_repeats):
            for v in variants:
                row = run_pipeline(args.size, Path(tmp), v, VARIANTS[v])
                study.setdefault(v, []).append(row)
                print(
                    f"variant {v:28} first {row.get('first_offload_gbps')} wait "
                    f"{row.get('first_copy_wait_seconds')} touch-s "
                    f"{row.get('touch_thread_seconds')} reg-s "
                    f"{row.get('register_thread_seconds')}",
                    flush=True,
                )
                doc["limit_study"] = study
                path.write_text(json.dumps(doc, indent=1) + "\n")
    doc["judged"] = judge(rounds)
    firsts: dict[str, list[float]] = {}
    for rows in rounds:
        for r in rows:
            if r.get("first_offload_gbps"):
                firsts.setdefault(str(r["item"]), []).append(r["first_offload_gbps"])
    doc["first_offload_median_gbps"] = {k: statistics.median(v) for k, v in firsts.items()}
    doc["wall_seconds"] = round(time.perf_counter() - begin, 1)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for j in doc["judged"]:
        met = all(c["met"] for c in j["checks"].values())
        print(
            f"round {j['round']} {j['strategy']:8} {j['first_offload_gbps']} vs pipeline "
            f"{j['pipeline_first_gbps']}: {'met' if met else 'NOT met'} {j['checks']}"
        )
    print("wrote", path, f"in {doc['wall_seconds']} s")


if __name__ == "__main__":
    main()
