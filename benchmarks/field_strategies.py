"""GPU benchmark: what each framework's offload costs, side by side on one model.

Data for the README table "What each framework's offload costs" (issue 12), every row an
``offloadprobe compare`` child in a fresh process:

* parameters, 5 GiB, 3 cycles: verl before / after PR 6193 (functions of the same shape,
  ``tests/integration/verl_shaped.py``), megatron-core's own buffer offload (``mcore``),
  torch_memory_saver (``tms``), ``lazy``, ``registered`` and ``pipelined``;
* optimizer state, 1 GiB, precision-aware, 2 cycles: verl before / after PR 6635, ``mcore``,
  ``complete`` (parameters by ``registered``), plus ``mcore`` with the parameters left on
  the device and ``mcore`` with classic Adam;
* allocator settings, 5 GiB, 2 cycles: ``naive``, ``lazy``, ``registered`` under every
  pinned-allocator setting the installed torch accepts;
* ``pipelined`` first-cycle sweep over worker threads.

Columns: host peak, steady host, host after load, pinned reserved, GPU left (PyTorch's
allocator), GPU the driver got back (``mem_get_info``), first and steady GB/s.

    python benchmarks/field_strategies.py --out benchmarks/results            # all parts
    python benchmarks/field_strategies.py --parts params --dry-run           # print commands
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # offloadprobe from this checkout
VERL = "tests.integration.verl_shaped"
PARAM_ROWS = {
    "verl pre-#6193": f"{VERL}:offload_megatron_model_to_cpu_pre6193,load_megatron_model_to_gpu",
    "verl post-#6193": f"{VERL}:offload_megatron_model_to_cpu,load_megatron_model_to_gpu",
    "megatron-core": "mcore",
    "torch_memory_saver": "tms",
    "lazy": "lazy",
    "registered": "registered",
    "pipelined": "pipelined",
}
OPTIMIZER_ROWS = {
    "verl pre-#6635": (
        f"{VERL}:offload_megatron_optimizer_pre6635,load_megatron_optimizer_pre6635@each"
    ),
    "verl post-#6635": f"{VERL}:offload_megatron_optimizer,load_megatron_optimizer@each",
    "megatron-core": "mcore",
    "complete": "complete",
}
ALLOC_STRATEGIES = ["naive", "lazy", "registered"]
ALLOC_SETTINGS = {
    "cuda_host_register": "pinned_use_cuda_host_register:True",
    "host_register_16_threads": (
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:16"
    ),
    "background_threads": "pinned_use_background_threads:True",
    "reserve_segment_8GiB": "pinned_reserve_segment_size_mb:8192",
    "round_threshold_64MiB": "pinned_max_round_threshold_mb:64",
}
PINNED_KEYS_FOR_TESTS = {k.split(":")[0] for c in ALLOC_SETTINGS.values() for k in c.split(",")}
PIPELINE_THREADS = [2, 16]
"""Besides the default 8 (the params part)."""
OPT = "--optimizer-strategy"


@dataclass(slots=True)
class Job:
    """One ``offloadprobe compare`` invocation and the labels of its rows."""

    part: str
    labels: dict[str, str]
    """compare row label -> table row label."""
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def label(strategy: str, optimizer: str | None = None, alloc_conf: str | None = None) -> str:
    """The row label ``offloadprobe compare`` gives this combination."""
    from offloadprobe.compare.comparison import Candidate

    return Candidate(strategy=strategy, optimizer_strategy=optimizer, alloc_conf=alloc_conf).label


def jobs(payload: str, opt_payload: str, device: str, available: set[str]) -> dict[str, list[Job]]:
    common = ["--device", device, "--no-reference-check"]
    params = Job(
        "params",
        {label(v): k for k, v in PARAM_ROWS.items()},
        [*PARAM_ROWS.values(), *common, "--payload", payload, "--cycles", "3"],
    )
    opt_common = ["--device", device, "--payload", opt_payload, "--cycles", "2"]
    optimizer = [
        Job(
            "optimizer",
            {label("registered", v): k for k, v in OPTIMIZER_ROWS.items()},
            [
                "registered",
                *[a for v in OPTIMIZER_ROWS.values() for a in (OPT, v)],
                "--precision-aware",
                *opt_common,
            ],
        ),
        Job(
            "optimizer",
            {label("none", "mcore"): "megatron-core, parameters left on the GPU"},
            ["none", "--optimizer-strategy", "mcore", "--precision-aware", *opt_common],
        ),
        Job(
            "optimizer",
            {label("mcore", "mcore"): "megatron-core both, classic Adam"},
            ["mcore", "--optimizer-strategy", "mcore", "--classic", *opt_common],
        ),
    ]
    alloc = []
    for name, conf in ALLOC_SETTINGS.items():
        if not all(k.split(":")[0] in available for k in conf.split(",")):
            continue
        labels = {label(s, alloc_conf=conf): f"{s}, {name}" for s in ALLOC_STRATEGIES}
        alloc.append(
            Job(
                "alloc",
                labels,
                [
                    *ALLOC_STRATEGIES,
                    "--alloc-conf",
                    conf,
                    *common,
                    "--payload",
                    payload,
                    "--cycles",
                    "2",
                ],
            )
        )
    sweep = [
        Job(
            "pipelined",
            {label("pipelined"): f"pipelined, {t} threads"},
            [
                "pipelined",
                *common,
                "--payload",
                payload,
                "--cycles",
                "2",
                "--strategy-option",
                f"threads={t}",
            ],
        )
        for t in PIPELINE_THREADS
    ] + [
        Job(
            "pipelined",
            {label("pipelined"): "pipelined, 8 threads, huge pages"},
            [
                "pipelined",
                *common,
                "--payload",
                payload,
                "--cycles",
                "2",
                "--strategy-option",
                "huge_pages=1",
            ],
        )
    ]
    return {"params": [params], "optimizer": optimizer, "alloc": alloc, "pipelined": sweep}


def _phases(run: dict, name: str) -> list[dict]:
    return [p for c in run.get("cycles") or [] for p in c["phases"] if p["phase"] == name]


def row(label: str, run: dict) -> dict:
    """One table row from one compare run: every figure read from the child's record."""
    s = run.get("summary") or {}
    payload = run.get("payload_bytes") or 0
    offloads, loads, trains = _phases(run, "offload"), _phases(run, "load"), _phases(run, "train")
    released = None
    if offloads and trains and offloads[-1].get("gpu") and trains[-1].get("gpu"):
        released = trains[-1]["gpu"]["device_used_after"] - offloads[-1]["gpu"]["device_used_after"]
    after_load = None
    if loads and run.get("baseline_host_bytes") is not None:
        host = loads[-1]["host"]  # emulated device bytes in RSS are not host memory
        after_load = host["rss_after"] - host.get("device_in_host_after", 0)
        after_load -= run["baseline_host_bytes"]
    return {
        "row": label,
        "strategy": run.get("strategy"),
        "optimizer_strategy": run.get("optimizer_strategy"),
        "alloc_conf": run.get("alloc_conf"),
        "verdict": run.get("verdict"),
        "exit_code": run.get("exit_code"),
        "payload_bytes": payload,
        "optimizer_state_bytes": s.get("optimizer_state_bytes"),
        "host_peak_bytes": s.get("host_peak_bytes"),
        "host_peak_x": s.get("host_peak_x"),
        "steady_host_bytes": s.get("steady_host_bytes"),
        "steady_host_x": s.get("steady_host_x"),
        "host_after_load_bytes": after_load,
        "pinned_reserved_bytes": s.get("pinned_reserved_bytes"),
        "gpu_left_bytes": s.get("gpu_left_after_offload_bytes"),
        "gpu_released_by_driver_bytes": released,
        "left_after_offload_bytes_by_key": s.get("left_after_offload_bytes_by_key"),
        "first_offload_gbps": s.get("first_offload_gbps"),
        "offload_gbps": s.get("offload_gbps"),
        "first_load_gbps": s.get("first_load_gbps"),
        "load_gbps": s.get("load_gbps"),
        "params": s.get("params"),
        "optimizer": s.get("optimizer"),
        "integrity_ok": s.get("integrity_ok"),
        "integrity": run.get("integrity"),
        "failure": run.get("failure"),
    }


def command(job: Job, out: Path) -> list[str]:
    return [sys.executable, "-m", "offloadprobe", "compare", *job.args, "--json", str(out)]


def pinned_keys() -> set[str]:
    from offloadprobe.core.alloc_conf import pinned_settings

    return {s.key for s in pinned_settings() if s.exists}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--parts", default="params,optimizer,alloc,pipelined")
    parser.add_argument("--payload", default="5GiB")
    parser.add_argument("--optimizer-payload", default="1GiB")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--machine", default="h200")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()
    args.out = args.out.resolve()
    parts = [p for p in args.parts.split(",") if p]
    day = dt.date.today().isoformat()
    available = pinned_keys()
    plan = jobs(args.payload, args.optimizer_payload, args.device, available)
    todo = [j for p in parts for j in plan.get(p, [])]
    if args.dry_run:
        for j in todo:
            env = " ".join(f"{k}={v}" for k, v in j.env.items())
            print(j.part, env, " ".join(command(j, Path("OUT.json"))))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    from offloadprobe.core import environment

    result: dict = {
        "benchmark": "field_strategies",
        "date": day,
        "parts": parts,
        "payload": args.payload,
        "optimizer_payload": args.optimizer_payload,
        "pinned_settings_accepted": sorted(available),
        "torch": torch.__version__,
        "versions": environment.versions(),
        "machine": environment.machine(),
        "commit": os.environ.get("GIT_COMMIT"),
        "rows": [],
    }
    suffix = "" if len(parts) == 4 else "-" + "-".join(parts)
    path = args.out / f"{args.machine}-{day}-field-strategies{suffix}.json"
    for index, job in enumerate(todo):
        out = args.out / f".field-{job.part}-{index}.json"
        cmd = command(job, out)
        print("+", " ".join(cmd), flush=True)
        start = time.perf_counter()
        env = {**os.environ, **job.env}
        paths = (str(HERE.parent), env.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        proc = subprocess.run(cmd, env=env, cwd=HERE.parent, check=False)
        seconds = round(time.perf_counter() - start, 1)
        if not out.exists():
            result["rows"].append(
                {
                    "part": job.part,
                    "error": f"compare exited {proc.returncode}",
                    "args": job.args,
                    "seconds": seconds,
                }
            )
            continue
        doc = json.loads(out.read_text())
        for run in doc["runs"]:
            label = job.labels.get(run["label"], run["label"])
            result["rows"].append(
                {"part": job.part, **row(label, run), "env": job.env, "compare_seconds": seconds}
            )
        out.unlink()
        path.write_text(json.dumps(result, indent=2) + "\n")  # partial results survive a kill
    path.write_text(json.dumps(result, indent=2) + "\n")
    for r in result["rows"]:
        gib = lambda b: "-" if b is None else f"{b / 2**30:.2f}"  # noqa: E731
        print(
            f"{r.get('part'):9} {r.get('row', '?'):40} {r.get('verdict')!s:10} "
            f"peak {r.get('host_peak_x')} steady {r.get('steady_host_x')} "
            f"pinned {gib(r.get('pinned_reserved_bytes'))} GiB "
            f"released {gib(r.get('gpu_released_by_driver_bytes'))} GiB "
            f"off {r.get('first_offload_gbps')}/{r.get('offload_gbps')} "
            f"load {r.get('first_load_gbps')}/{r.get('load_gbps')}"
        )
    print("wrote", path)


if __name__ == "__main__":
    main()
