"""The page-locking ceiling, component by component, each case in a fresh process
(``benchmarks/first_offload.py`` starts one per case and keeps what it prints).

Cases:

* ``touch`` (no torch, no CUDA): first touch of ``--bytes`` by page size (4 KiB, huge),
  method (``MADV_POPULATE_WRITE``, ``memset``) and thread count, three ways each: fresh
  memory (a new mapping; every earlier one stays resident, so none is reused), again right
  after ``MADV_DONTNEED`` (memory the kernel just got back), and, for huge pages on the most
  threads, again after ``--idle-seconds`` idle (what ``relock`` meets after a train phase);
* ``touched-huge``, ``touched-4k``: touch, then one ``cudaHostRegister`` of the range, the
  device-to-host copy into it (first and again), host-to-device, ``cudaHostUnregister``,
  ``MADV_DONTNEED``; ``touched-huge`` also registers a second mapping in 64 MiB chunks on one
  thread and copies one chunk per copy (``hugepin``'s shape without the overlap);
* ``untouched-huge``, ``untouched-4k``: ``cudaHostRegister`` of memory never touched (the
  driver faults it in); ``untouched-huge-parallel``: the same in 64 MiB chunks on the threads.

Each CUDA case first runs the warm-up ``hugepin`` runs when it is built (one huge page
registered, copied into, unregistered) and reports its seconds.

    python benchmarks/first_offload_components.py --case touch --bytes 2GiB --out touch.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # offloadprobe from this checkout

from offloadprobe.engine import hostmem  # noqa: E402

CHUNK = 64 * 2**20
CUDA_CASES = (
    "touched-huge",
    "touched-4k",
    "untouched-huge",
    "untouched-4k",
    "untouched-huge-parallel",
)
CASES = ("touch", *CUDA_CASES)


def _pool(threads: int) -> ThreadPoolExecutor:
    """A pool with every thread started (thread creation is not what is timed)."""
    pool = ThreadPoolExecutor(threads)
    barrier = threading.Barrier(threads)
    wait([pool.submit(barrier.wait) for _ in range(threads)])
    return pool


def _chunks(m: hostmem.Mapping) -> tuple[tuple[int, int], ...]:
    return hostmem.plan_chunks(m.length, CHUNK)


def touch_parallel(m: hostmem.Mapping, pool: ThreadPoolExecutor, method: str) -> tuple[float, str]:
    """Seconds to touch the whole mapping in 64 MiB chunks on the pool; the method used."""
    start = time.perf_counter()
    used = list(pool.map(lambda c: hostmem.touch(m.address + c[0], c[1], method), _chunks(m)))
    return time.perf_counter() - start, used[0]


def anon_huge_total() -> int | None:
    """``AnonHugePages`` of the whole process (``smaps_rollup``); None where not reported.
    Read before and after a touch: the difference is what the touch got as huge pages."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _delta(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


def _rate(nbytes: int, seconds: float | None) -> float | None:
    return None if not seconds else round(nbytes / seconds / 1e9, 2)


def touch_grid(nbytes: int, threads: list[int], idle_s: float) -> dict[str, Any]:
    kept, rows = [], []
    for huge in (True, False):
        for method in ("populate", "memset"):
            for n in threads:
                pool = _pool(n)
                m = hostmem.map_exact(nbytes, huge=huge)
                kept.append(m)
                before = anon_huge_total()
                try:
                    fresh, used = touch_parallel(m, pool, method)
                except OSError as exc:  # e.g. no MADV_POPULATE_WRITE here
                    rows.append({"huge": huge, "method": method, "threads": n, "error": str(exc)})
                    pool.shutdown()
                    continue
                hostmem.release(m.address, m.length)
                again, _ = touch_parallel(m, pool, method)
                pool.shutdown()
                rows.append(
                    {
                        "huge": huge,
                        "huge_refused": m.refused,
                        "method": used,
                        "threads": n,
                        "huge_page_bytes": _delta(before, anon_huge_total()),
                        "fresh_seconds": round(fresh, 4),
                        "fresh_gbps": _rate(nbytes, fresh),
                        "after_release_seconds": round(again, 4),
                        "after_release_gbps": _rate(nbytes, again),
                    }
                )
    n = max(threads)
    pool = _pool(n)
    m = hostmem.map_exact(nbytes, huge=True)
    touch_parallel(m, pool, "auto")
    hostmem.release(m.address, m.length)
    time.sleep(idle_s)
    idle, used = touch_parallel(m, pool, "auto")
    pool.shutdown()
    for mapping in [*kept, m]:
        hostmem.unmap(mapping)
    return {
        "case": "touch",
        "bytes": nbytes,
        "thp": hostmem.thp_mode(),
        "thp_defrag": _defrag(),
        "rows": rows,
        "after_idle": {
            "huge": True,
            "threads": n,
            "method": used,
            "idle_seconds": idle_s,
            "seconds": round(idle, 4),
            "gbps": _rate(nbytes, idle),
        },
    }


def _defrag() -> str | None:
    try:
        text = (hostmem.THP / "defrag").read_text()
    except OSError:
        return None
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else text.strip()


def _frombuffer(torch: Any, address: int, size: int) -> Any:
    return torch.frombuffer((ctypes.c_uint8 * size).from_address(address), dtype=torch.uint8)


def _timed(torch: Any, fn: Any) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _warm_up(torch: Any, cudart: hostmem.Cudart, stream: Any) -> float:
    start = time.perf_counter()
    size = hostmem.huge_page_size()
    m = hostmem.map_exact(size, huge=True)
    hostmem.touch(m.address, m.length, "auto")
    cudart.register(m.address, size)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(stream):
        _frombuffer(torch, m.address, size).copy_(device, non_blocking=True)
    stream.synchronize()
    cudart.unregister(m.address)
    hostmem.unmap(m)
    return time.perf_counter() - start


def cuda_case(case: str, nbytes: int, threads: int) -> dict[str, Any]:
    start = time.perf_counter()
    import torch

    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(7)
    torch.cuda.synchronize()
    cudart = hostmem.Cudart.loaded(torch.cuda.current_device())
    if cudart is None:
        return {"case": case, "error": "libcudart is not a loaded shared object"}
    out: dict[str, Any] = {
        "case": case,
        "bytes": nbytes,
        "threads": threads,
        "start_seconds": round(time.perf_counter() - start, 3),
    }
    stream = torch.cuda.Stream()
    out["warmup_seconds"] = round(_warm_up(torch, cudart, stream), 4)
    huge, touched = "huge" in case, case.startswith("touched")
    pool = _pool(threads)
    m = hostmem.map_exact(nbytes, huge=huge)
    out["huge_refused"] = m.refused if huge else None
    before = anon_huge_total()
    if touched:
        seconds, out["touch_method"] = touch_parallel(m, pool, "auto")
        out["touch_seconds"], out["touch_gbps"] = round(seconds, 4), _rate(nbytes, seconds)
    ranges = [(m.address, nbytes)]
    t = time.perf_counter()
    if case == "untouched-huge-parallel":
        ranges = [(m.address + o, n) for o, n in hostmem.plan_chunks(nbytes, CHUNK)]
        wait([pool.submit(cudart.register, a, n) for a, n in ranges])
    else:
        cudart.register(m.address, nbytes)
    seconds = time.perf_counter() - t
    out["register_seconds"], out["register_gbps"] = round(seconds, 4), _rate(nbytes, seconds)
    out["huge_page_bytes"] = _delta(before, anon_huge_total())
    host = _frombuffer(torch, m.address, nbytes)

    def d2h() -> None:
        for a, n in ranges:
            o = a - m.address
            host[o : o + n].copy_(device[o : o + n], non_blocking=True)

    def h2d() -> None:
        for a, n in ranges:
            o = a - m.address
            device[o : o + n].copy_(host[o : o + n], non_blocking=True)

    for name, fn in (("d2h_first", d2h), ("d2h_again", d2h), ("h2d", h2d)):
        seconds = _timed(torch, fn)
        out[f"{name}_seconds"], out[f"{name}_gbps"] = round(seconds, 4), _rate(nbytes, seconds)
    out["copy_ok"] = bool(torch.equal(host[: 2**20], device[: 2**20].cpu()))
    t = time.perf_counter()
    for a, _ in ranges:
        cudart.unregister(a)
    out["unregister_seconds"] = round(time.perf_counter() - t, 4)
    t = time.perf_counter()
    hostmem.release(m.address, m.length)
    out["release_seconds"] = round(time.perf_counter() - t, 4)
    host = None
    hostmem.unmap(m)
    if case == "touched-huge":
        out["chunked"] = _chunked(torch, cudart, pool, device, nbytes)
    pool.shutdown()
    return out


def _chunked(
    torch: Any, cudart: hostmem.Cudart, pool: ThreadPoolExecutor, device: Any, nbytes: int
) -> dict[str, Any]:
    """A second mapping, touched, registered in 64 MiB chunks on one thread, one copy per
    chunk: each stage on its own, no overlap."""
    m = hostmem.map_exact(nbytes, huge=True)
    touch_s, _ = touch_parallel(m, pool, "auto")
    chunks = hostmem.plan_chunks(nbytes, CHUNK)
    t = time.perf_counter()
    for o, n in chunks:
        cudart.register(m.address + o, n)
    register_s = time.perf_counter() - t
    host = _frombuffer(torch, m.address, nbytes)

    def d2h() -> None:
        for o, n in chunks:
            host[o : o + n].copy_(device[o : o + n], non_blocking=True)

    copy_s = _timed(torch, d2h)
    t = time.perf_counter()
    for o, _ in chunks:
        cudart.unregister(m.address + o)
    unregister_s = time.perf_counter() - t
    host = None
    hostmem.unmap(m)
    contended = _register_while_touching(cudart, pool, nbytes)
    side_by_side = {k: _register_on_threads(cudart, pool, nbytes, k) for k in (2, 4)}
    return {
        **contended,
        "register_threads_gbps": side_by_side,
        "chunk_bytes": CHUNK,
        "chunks": len(chunks),
        "touch_seconds": round(touch_s, 4),
        "touch_gbps": _rate(nbytes, touch_s),
        "register_seconds": round(register_s, 4),
        "register_gbps": _rate(nbytes, register_s),
        "d2h_seconds": round(copy_s, 4),
        "d2h_gbps": _rate(nbytes, copy_s),
        "unregister_seconds": round(unregister_s, 4),
    }


def _register_on_threads(
    cudart: hostmem.Cudart, pool: ThreadPoolExecutor, nbytes: int, threads: int
) -> float | None:
    """``cudaHostRegister`` of touched huge pages in 64 MiB chunks from ``threads`` threads
    at once (each the next chunk): whether the driver pins in parallel (GB/s, all bytes)."""
    m = hostmem.map_exact(nbytes, huge=True)
    touch_parallel(m, pool, "auto")
    chunks = hostmem.plan_chunks(nbytes, CHUNK)
    with ThreadPoolExecutor(threads) as registrars:
        start = time.perf_counter()
        calls = [registrars.submit(cudart.register, m.address + o, n) for o, n in chunks]
        for call in calls:
            call.result()  # a failed registration fails the case
        seconds = time.perf_counter() - start
    for o, _ in chunks:
        cudart.unregister(m.address + o)
    hostmem.unmap(m)
    return _rate(nbytes, seconds)


def _register_while_touching(
    cudart: hostmem.Cudart, pool: ThreadPoolExecutor, nbytes: int
) -> dict[str, Any]:
    """What a pipelined first offload asks of one process at once: one thread registers
    touched memory chunk by chunk while the pool faults in another mapping of the same
    size. Each rate beside its rate alone (``register_gbps``, ``touch_gbps``) says whether
    page faults and page-locking slow each other down in one address space."""
    locked = hostmem.map_exact(nbytes, huge=True)
    touch_parallel(locked, pool, "auto")
    fresh = hostmem.map_exact(nbytes, huge=True)
    chunks = hostmem.plan_chunks(nbytes, CHUNK)
    start = time.perf_counter()
    touching = [
        pool.submit(hostmem.touch, fresh.address + o, n, "auto")
        for o, n in hostmem.plan_chunks(nbytes, CHUNK)
    ]
    for o, n in chunks:
        cudart.register(locked.address + o, n)
    register_s = time.perf_counter() - start
    wait(touching)
    touch_s = time.perf_counter() - start
    for o, _ in chunks:
        cudart.unregister(locked.address + o)
    hostmem.unmap(locked)
    hostmem.unmap(fresh)
    return {
        "register_while_touching_seconds": round(register_s, 4),
        "register_while_touching_gbps": _rate(nbytes, register_s),
        "touch_while_registering_seconds": round(touch_s, 4),
        "touch_while_registering_gbps": _rate(nbytes, touch_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--bytes", default="2GiB")
    parser.add_argument("--threads", default="")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from offloadprobe.core.units import parse_size

    nbytes = parse_size(args.bytes)
    default = hostmem.worker_threads(hostmem.available_cpus())
    threads = [int(t) for t in args.threads.split(",") if t] or [1, 8, default]
    if args.case == "touch":
        doc = touch_grid(nbytes, sorted(set(threads)), args.idle_seconds)
    else:
        doc = cuda_case(args.case, nbytes, max(threads))
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
