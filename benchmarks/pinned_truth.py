"""Pinned truth on one GPU (issue 35, point 10), in one command under 3 minutes.

1. A child process (fresh CUDA state) starts offloadprobe's CUPTI routes, then page-locks
   touched anonymous mappings in 8 MiB chunks: from the main thread and from a
   ``ThreadPoolExecutor``, through ``torch.cuda.cudart()`` (flags 0) and through ctypes on
   torch's ``libcudart`` (portable flag: ``hugepin``'s route, which ``MEMORY2`` missed on
   the H200), and makes a torch pinned tensor on the main thread and on a pool thread.
   After each step it reads every route: CUPTI's ``MEMORY2`` records, the API callbacks
   (``measure/cupti_calls.py``), their union (what the pinned probe reads), the kernel's
   ``VmPin``/``VmLck`` and ``smaps_rollup`` ``Locked``, and torch's host allocator stats.
2. The same child runs 3 cycles of a fresh pinned copy per offload, dropped at the load
   (cached blocks reused), and keeps torch's raw ``host_memory_stats`` after each step
   beside the reading ``core/pinned_stats.py`` gives.
3. ``pytest tests/gpu/test_pinned_truth_cuda.py`` (three ``offloadprobe run`` rows).

    python benchmarks/pinned_truth.py --out "$OUT"

Writes ``pinned-truth.json`` and ``pinned-truth.log`` (parts 1 and 2), ``pytest.log`` and
the runs' JSON under ``runs/``; exits 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import mmap
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MiB = 2**20
CHUNK = 8 * MiB
CHUNKS = 4
THREADS = 4
RUNTIME = 8 * MiB
"""Page-locked buffers the CUDA runtime makes for itself (4.5 MiB recorded on the H200)."""


def kernel_locked() -> dict[str, int | None]:
    """What the kernel says this process has pinned or locked (bytes; None if unread)."""
    out: dict[str, int | None] = {"VmPin": None, "VmLck": None, "smaps_Locked": None}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmPin", "VmLck"):
                out[key] = int(value.split()[0]) * 1024
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("Locked:"):
                out["smaps_Locked"] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def probe(out: Path) -> int:
    """Parts 1 and 2, in this (child) process."""
    faulthandler.dump_traceback_later(55, exit=True)  # a hang prints every stack, exits
    from offloadprobe.measure import cupti_memory

    note = cupti_memory.start()  # before CUDA is first used
    import torch

    from offloadprobe.core import pinned_stats
    from offloadprobe.engine.hostmem import Cudart
    from offloadprobe.measure.cupti_memory import CALLS, LOCKED, PINNED

    if not torch.cuda.is_available():
        print("pinned_truth: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.cuda.init()
    torch.cuda.set_device(0)
    source = cupti_memory.pinned()
    log = open(out / "pinned-truth.log", "w")  # noqa: SIM115 (closed at the end)

    def say(text: str) -> None:
        print(text, flush=True)
        log.write(text + "\n")

    say(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    say(f"CUPTI: {note}")
    rows: list[dict] = []

    def read(step: str, true_locked: int) -> dict:
        torch.cuda.synchronize()
        row: dict = {"step": step, "true_locked_bytes": true_locked}
        if source is not None:
            source.flush()
            row["memory2_pinned"] = source.log.live(PINNED)
            row["callbacks"] = source.log.live(CALLS)
            row["locked_union"] = source.log.live(LOCKED)
            calls = source.calls
            row["callback_problem"] = None if calls is None else calls.problem
        row.update(kernel_locked())
        stats = dict(torch.cuda.host_memory_stats())
        row["torch_allocated_bytes"] = stats.get("allocated_bytes.current")
        row["torch_active_bytes"] = stats.get("active_bytes.current")
        rows.append(row)
        say(json.dumps(row))
        return row

    cudart = Cudart.loaded(0)
    routes = {
        "torch.cuda.cudart(), flags 0": lambda a, n: _check(
            int(torch.cuda.cudart().cudaHostRegister(a, n, 0)), "cudaHostRegister"
        ),
        "ctypes libcudart, portable (hugepin's)": (
            (lambda a, n: cudart.register(a, n)) if cudart is not None else None
        ),
    }
    pool = ThreadPoolExecutor(THREADS, thread_name_prefix="pool-register")
    keep, failures = [], []
    base = read("start", 0)
    runtime_floor = base.get("locked_union") or 0
    true_locked = 0
    for route_name, register in routes.items():
        if register is None:
            say(f"skipped {route_name}: libcudart is not a loaded shared object")
            continue
        for where in ("main thread", f"{THREADS} pool threads"):
            mapping = mmap.mmap(-1, CHUNK * CHUNKS)
            mapping.write(b"\1" * len(mapping))  # touched: resident before it is locked
            address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
            starts = [address + i * CHUNK for i in range(CHUNKS)]
            t = time.perf_counter()
            if where == "main thread":
                for s in starts:
                    register(s, CHUNK)
            else:
                list(pool.map(register, starts, [CHUNK] * CHUNKS))
            true_locked += CHUNK * CHUNKS
            keep.append((mapping, starts))
            row = read(f"{route_name}, {where}", true_locked)
            row["seconds"] = time.perf_counter() - t
            _judge(row, runtime_floor, failures, say)
    tensors = [torch.empty(16 * MiB, dtype=torch.uint8, pin_memory=True)]
    true_locked += 16 * MiB
    _judge(read("torch pinned 16 MiB, main thread", true_locked), runtime_floor, failures, say)
    tensors.append(
        pool.submit(lambda: torch.empty(16 * MiB, dtype=torch.uint8, pin_memory=True)).result()
    )
    true_locked += 16 * MiB
    _judge(read("torch pinned 16 MiB, pool thread", true_locked), runtime_floor, failures, say)
    for _mapping, starts in keep:
        list(pool.map(lambda s: torch.cuda.cudart().cudaHostUnregister(s), starts))
        true_locked -= CHUNK * CHUNKS
    row = read("every registration unregistered from pool threads", true_locked)
    _judge(row, runtime_floor, failures, say)

    # part 2: a fresh pinned copy each offload, dropped at the load
    device = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    cycles = []
    for cycle in range(3):
        host = torch.empty(16 * MiB, dtype=torch.uint8, pin_memory=True)
        host.copy_(device, non_blocking=True)
        torch.cuda.synchronize()
        cycles.append(_stats_row("offload", cycle, torch, pinned_stats))
        device.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        del host
        cycles.append(_stats_row("load", cycle, torch, pinned_stats))
        say(json.dumps(cycles[-2:]))
    in_use = [c["read_in_use"] for c in cycles if c["phase"] == "offload"]
    owned = {c["read_owned"] for c in cycles}
    if len(owned) != 1:
        failures.append(f"pinned owned not flat over the reuse cycles: {sorted(owned)}")
    if None not in in_use and max(in_use) - min(in_use) > MiB:
        failures.append(f"pinned in use read climbing over the reuse cycles: {in_use}")
    if (None in in_use) == pinned_stats.counts_frees(torch.__version__):
        failures.append(f"in use None on torch {torch.__version__} is not what the rule says")
    doc = {
        "machine": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cupti_note": note,
        "why_not_memory2": None if cupti_memory.active() else cupti_memory.why_not(),
        "callback_calls": None if source is None or source.calls is None else source.calls.calls,
        "routes": rows,
        "reuse_cycles": cycles,
        "failures": failures,
    }
    (out / "pinned-truth.json").write_text(json.dumps(doc, indent=1))
    say("part 1-2 checks: " + ("all hold" if not failures else "; ".join(failures)))
    log.close()
    return 1 if failures else 0


def _check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what} failed: cudaError {err}")


def _judge(row: dict, floor: int, failures: list[str], say) -> None:
    """By fact: the union sees every page-locked byte, from any thread, once each (within
    the runtime's own buffers); the row says which route saw what."""
    union = row.get("locked_union")
    if union is None:
        failures.append(f"{row['step']}: no CUPTI route ({row})")
        return
    seen, true = union - floor, row["true_locked_bytes"]
    ok = true <= seen <= true + RUNTIME
    if not ok:
        failures.append(f"{row['step']}: union {seen} over the start vs truth {true}")
    say(f"  -> union {seen / MiB:.1f} MiB, truth {true / MiB:.1f} MiB: {'ok' if ok else 'WRONG'}")


def _stats_row(phase: str, cycle: int, torch, pinned_stats) -> dict:
    stats = dict(torch.cuda.host_memory_stats())
    figures = pinned_stats.read(stats, torch.__version__)
    return {
        "phase": phase,
        "cycle": cycle,
        "allocated_bytes.current": stats.get("allocated_bytes.current"),
        "active_bytes.current": stats.get("active_bytes.current"),
        "active_bytes.freed": stats.get("active_bytes.freed"),
        "active_requests.current": stats.get("active_requests.current"),
        "read_owned": figures.reserved,
        "read_in_use": figures.in_use,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.probe:
        return probe(args.out)
    started = time.perf_counter()
    try:
        probe_code = subprocess.run(
            [sys.executable, __file__, "--probe", "--out", str(args.out)], timeout=60, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        probe_code = 124
    test = "tests/gpu/test_pinned_truth_cuda.py"
    command = [sys.executable, "-W", "ignore", "-m", "pytest", test]
    command += ["-v", "-o", "addopts=-ra", "-p", "no:cacheprovider", "--durations=0"]
    command += ["--basetemp", str(args.out / "runs")]
    try:
        tests = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=115)
        log, tests_code = tests.stdout + tests.stderr, tests.returncode
    except subprocess.TimeoutExpired as late:
        log, tests_code = f"{late.stdout or ''}{late.stderr or ''}\nTIMED OUT after 115 s", 124
    log = log if isinstance(log, str) else log.decode(errors="replace")
    (args.out / "pytest.log").write_text(log)
    print(log[-3000:])
    seconds = time.perf_counter() - started
    print(f"probe exit {probe_code}, tests exit {tests_code}, {seconds:.0f} s; logs in {args.out}")
    return 0 if probe_code == 0 and tests_code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
