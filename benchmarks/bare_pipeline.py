"""The bare first-offload pipeline (issue 38): a reference that shares no code with
offloadprobe, run in a fresh process, so the strategies' first offload is a ratio to what
plain code reaches on the same machine in the same session.

One device buffer of ``--bytes`` random bytes goes to host memory the way ``hugepin``
does it, with nothing around it: one private anonymous mapping advised
``MADV_HUGEPAGE``, cut into ``--chunk-mib`` chunks; ``--threads`` threads first-touch the
chunks (``memset``, or ``MADV_POPULATE_WRITE``); one registering thread calls
``cudaHostRegister`` on each chunk in address order as soon as it is touched; the main
thread issues each registered chunk's device-to-host copy on a side stream. The clock
runs from the ``mmap`` to the last copy landed. A second cycle copies into the same
registered memory (the steady rate). Before the clock starts the process warms the path
once on one huge page (threads, stream, one register, copy and unregister), as the
strategy does at construction.

Variants for the limit study (each one stage changed, everything else the same):
``--touch resident`` faults every page in before the clock (the pipeline without page
faults: register and copy only); ``--registrars K`` splits the buffer into K mappings,
each with its own registering thread; ``--register-mib`` registers that many bytes per
call (copies stay per chunk); ``--first-chunk-mib`` starts with smaller chunks that double
up to ``--chunk-mib`` (a shorter fill); ``--huge 0`` keeps 4 KiB pages; ``--no-copy``
leaves the copies out.

    python benchmarks/bare_pipeline.py --bytes 5GiB --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import torch

MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23
HUGE = 2 * 2**20
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def size(text: str) -> int:
    units = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def cudart() -> ctypes.CDLL:
    """The libcudart torch loaded (one runtime, one context), so calls release the GIL."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if os.path.basename(path).startswith("libcudart.so"):
            lib = ctypes.CDLL(path)
            lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
            lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
            return lib
    raise SystemExit("libcudart is not a loaded shared object")


def check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what}: error {err}")


def map_huge(nbytes: int, huge: bool) -> int:
    """An anonymous mapping of ``nbytes`` starting on a huge-page boundary."""
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    raw = libc.mmap(None, nbytes + HUGE, prot, flags, -1, 0)
    if raw in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    address = -(-raw // HUGE) * HUGE
    if huge:
        check(libc.madvise(address, nbytes, MADV_HUGEPAGE), "madvise(MADV_HUGEPAGE)")
    return address


def chunks(nbytes: int, first: int, chunk: int) -> list[tuple[int, int]]:
    """(offset, size) tiles; sizes double from ``first`` up to ``chunk``."""
    out, offset, step = [], 0, min(first, chunk)
    while offset < nbytes:
        out.append((offset, min(step, nbytes - offset)))
        offset, step = offset + step, min(step * 2, chunk)
    return out


def touch(address: int, length: int, how: str) -> float:
    start = time.perf_counter()
    if how == "populate":
        check(libc.madvise(address, length, MADV_POPULATE_WRITE), "MADV_POPULATE_WRITE")
    elif how in ("memset", "resident"):
        libc.memset(address, 0, length)
    return time.perf_counter() - start


def vm_counters() -> dict[str, int]:
    keys = ("thp_fault_alloc", "thp_fault_fallback", "pgfault")
    text = Path("/proc/vmstat").read_text().split()
    counters = dict(zip(text[::2], text[1::2], strict=False))
    mem = Path("/proc/meminfo").read_text().split("\n")[0].split()
    return {**{k: int(counters.get(k, 0)) for k in keys}, "mem_total_bytes": int(mem[1]) * 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=size, default=size("5GiB"))
    p.add_argument("--threads", type=int, default=12)
    p.add_argument("--chunk-mib", type=int, default=64)
    p.add_argument("--first-chunk-mib", type=int, default=0, help="0: --chunk-mib")
    p.add_argument("--register-mib", type=int, default=0, help="0: one call per chunk")
    p.add_argument("--registrars", type=int, default=1)
    p.add_argument("--touch", choices=("memset", "populate", "resident"), default="memset")
    p.add_argument("--huge", type=int, default=1)
    p.add_argument("--no-copy", action="store_true")
    p.add_argument("--label", default="pipeline")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    lib, n = cudart() if torch.cuda.is_available() else None, a.bytes
    if lib is None:
        raise SystemExit("no CUDA device: the bare pipeline measures a real page-locking")
    torch.cuda.init()
    source = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    stream, pool = torch.cuda.Stream(), ThreadPoolExecutor(a.threads)
    registrars = [ThreadPoolExecutor(1) for _ in range(a.registrars)]
    barrier = threading.Barrier(a.threads)
    wait([pool.submit(barrier.wait) for _ in range(a.threads)])
    warm = map_huge(HUGE, True)  # one huge page through the whole path, off the clock
    touch(warm, HUGE, "memset")
    for r in registrars:
        r.submit(lambda: check(lib.cudaHostRegister(warm, HUGE, 1), "register")).result()
        r.submit(lambda: check(lib.cudaHostUnregister(warm), "unregister")).result()
    tiny = torch.frombuffer((ctypes.c_uint8 * HUGE).from_address(warm), dtype=torch.uint8)
    check(lib.cudaHostRegister(warm, HUGE, 1), "register")
    with torch.cuda.stream(stream):
        tiny.copy_(source[:HUGE], non_blocking=True)
    stream.synchronize()
    check(lib.cudaHostUnregister(warm), "unregister")
    libc.munmap(warm, 2 * HUGE)
    torch.cuda.synchronize()
    parts = [(i * n // a.registrars, (i + 1) * n // a.registrars) for i in range(a.registrars)]
    counters_before = vm_counters()
    addresses: list[int] = []
    if a.touch == "resident":  # the pipeline without page faults: touched off the clock
        addresses = [map_huge(hi - lo, bool(a.huge)) for lo, hi in parts]
        spans = zip(addresses, parts, strict=True)
        wait([pool.submit(touch, addr, hi - lo, "memset") for addr, (lo, hi) in spans])
    first_chunk = (a.first_chunk_mib or a.chunk_mib) * 2**20
    start = time.perf_counter()
    if not addresses:
        addresses = [map_huge(hi - lo, bool(a.huge)) for lo, hi in parts]
    plan = [chunks(hi - lo, first_chunk, a.chunk_mib * 2**20) for lo, hi in parts]
    touched: list[list[Future[float]]] = [
        [pool.submit(touch, addr + o, s, a.touch) for o, s in tiles]
        for addr, tiles in zip(addresses, plan, strict=True)
    ]
    register_bytes = a.register_mib * 2**20
    # register groups: one cudaHostRegister per chunk, or per --register-mib of chunks
    groups = [
        [o // register_bytes if register_bytes else i for i, (o, _) in enumerate(tiles)]
        for tiles in plan
    ]

    def lock(k: int, members: list[int]) -> tuple[float, float]:
        """Wait for the group's chunks to be touched; register their range in one call."""
        seconds = sum(touched[k][i].result() for i in members)
        lo, hi = plan[k][members[0]][0], sum(plan[k][members[-1]])
        t = time.perf_counter()
        check(lib.cudaHostRegister(addresses[k] + lo, hi - lo, 1), "cudaHostRegister")
        return seconds, time.perf_counter() - t

    locked: list[dict[int, Future[tuple[float, float]]]] = []
    for k, of in enumerate(groups):
        members: dict[int, list[int]] = {}
        for i, g in enumerate(of):
            members.setdefault(g, []).append(i)
        locked.append({g: registrars[k].submit(lock, k, m) for g, m in members.items()})
    order = sorted(
        ((lo + o, k, i) for k, (lo, _) in enumerate(parts) for i, (o, _) in enumerate(plan[k]))
    )
    first_copy = None
    hosts = [
        torch.frombuffer((ctypes.c_uint8 * (hi - lo)).from_address(addr), dtype=torch.uint8)
        for addr, (lo, hi) in zip(addresses, parts, strict=True)
    ]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for at, k, i in order:
            o, s = plan[k][i]
            locked[k][groups[k][i]].result()
            if not a.no_copy:
                hosts[k][o : o + s].copy_(source[at : at + s], non_blocking=True)
            if first_copy is None:
                first_copy = time.perf_counter() - start
    stream.synchronize()
    seconds = time.perf_counter() - start
    counters_after = vm_counters()
    timings = [f.result() for row in locked for f in row.values()]
    steady = []
    for _ in range(2):  # later cycles: the same registered memory
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.cuda.stream(stream):
            for at, k, i in order:
                o, s = plan[k][i]
                hosts[k][o : o + s].copy_(source[at : at + s], non_blocking=True)
        stream.synchronize()
        steady.append(n / (time.perf_counter() - t) / 1e9)
    back = torch.empty_like(source)  # one copy per registered range, as the offload's
    for at, k, i in order:
        o, s = plan[k][i]
        back[at : at + s].copy_(hosts[k][o : o + s])
    exact = bool(torch.equal(back, source))
    result = {
        "label": a.label,
        "options": {k: v for k, v in vars(a).items() if k not in ("json", "label")},
        "bytes": n,
        "first_offload_seconds": round(seconds, 5),
        "first_offload_gbps": round(n / seconds / 1e9, 2),
        "first_copy_wait_seconds": round(first_copy or 0.0, 5),
        "touch_thread_seconds": round(sum(t for t, _ in timings), 4),
        "register_thread_seconds": round(sum(r for _, r in timings), 4),
        "register_calls": len(timings),
        "register_call_ms": [round(r * 1e3, 2) for _, r in timings],
        "steady_offload_gbps": [round(g, 2) for g in steady],
        "bit_exact": exact,
        "vm_before": counters_before,
        "vm_after": counters_after,
        "huge_pages_faulted": counters_after["thp_fault_alloc"]
        - counters_before["thp_fault_alloc"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    print(json.dumps(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")
    for k, addr in enumerate(addresses):
        for g in sorted(set(groups[k])):
            first = groups[k].index(g)
            check(lib.cudaHostUnregister(addr + plan[k][first][0]), "cudaHostUnregister")
    if not exact:
        raise SystemExit("the host copy differs from the device buffer")


if __name__ == "__main__":
    main()
