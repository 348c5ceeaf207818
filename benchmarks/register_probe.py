"""One fresh process of the registration-spread study (issue 38; ``register_spread.py``
runs several and reads them): ``cudaHostRegister`` of ``--bytes`` of host memory under
each condition of ``CONDITIONS``, one thing changed at a time from ``base``, with what
the kernel says about the pages and the registering thread around every call.

``base``: one anonymous mapping advised ``MADV_HUGEPAGE``, first-touched by ``--threads``
``memset`` threads before the clock, then registered by one thread in 64 MiB calls with
the portable flag. Every condition maps fresh memory, so the page allocator's state
before it (``/proc/buddyinfo``) is part of its record. ``base`` runs first and
``base-repeat`` last; the others in an order rotated by ``--shift``.

Read for each mapping, off the clock: transparent huge pages (``AnonHugePages`` of the
mapping in ``/proc/self/smaps``), the NUMA node of one page every 2 MiB (``move_pages``),
the physical frames (``/proc/self/pagemap``; zero without CAP_SYS_ADMIN, and said so):
physically contiguous runs, 2 MiB frames aligned and whole, runs inside each chunk. For
every call: wall and thread CPU time, voluntary and involuntary context switches of the
thread, its CPU before and after; for the condition: steal time, vmstat's compaction and
THP counters. ``--compact`` asks the kernel to compact all memory first (root only).

``--dry-run`` (no CUDA): ``mlock`` stands in for ``cudaHostRegister`` (the kernel's
page-locking without the driver's), ``mallochost`` is not run; the record says so.

    python benchmarks/register_probe.py --bytes 5GiB --json probe.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bare_pipeline as bp  # noqa: E402  (a sibling script: mmap, memset, libcudart)

from offloadprobe.engine.hugepin_settings import cpu_siblings, placement  # noqa: E402

MIB = 2**20
DEFAULT: dict[str, Any] = {
    "kind": "register",
    "huge": True,
    "touch": "memset",
    "chunk_mib": 64,
    "registrars": 1,
    "flags": 1,
    "core": False,
}
CONDITIONS: dict[str, dict[str, Any]] = {
    "base": {},
    "concurrent": {"touch": "concurrent"},  # touched while registered, as the pipeline
    "concurrent-core": {"touch": "concurrent", "core": True},  # the register_core fix
    "no-huge": {"huge": False},
    "populate": {"touch": "populate"},
    "chunk-4mib": {"chunk_mib": 4},
    "chunk-1gib": {"chunk_mib": 1024},
    "registrars-2": {"registrars": 2},
    "registrars-4": {"registrars": 4},
    "flags-0": {"flags": 0},
    "flags-readonly": {"flags": 9},  # diagnostic only: an offload writes into the pages
    "mallochost": {"kind": "mallochost"},
    "base-repeat": {},
}
SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}.get(platform.machine())
libc = bp.libc
libc.sched_getcpu.restype = ctypes.c_int
libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.syscall.restype = ctypes.c_long


def read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def buddy() -> dict[str, Any]:
    """Free blocks per order and zone, and the bytes free in blocks of 2 MiB or more."""
    zones, big = {}, 0
    for line in (read("/proc/buddyinfo") or "").splitlines():
        words = line.replace(",", " ").split()
        counts = [int(c) for c in words[4:]]
        zones[f"{words[1]}/{words[3]}"] = counts
        big += sum(c * 2**order * 4096 for order, c in enumerate(counts) if order >= 9)
    return {"zones": zones, "free_2mib_plus_bytes": big}


def vmstat() -> dict[str, int]:
    words = (read("/proc/vmstat") or "").split()
    pairs = zip(words[::2], words[1::2], strict=False)
    keep = ("thp_", "compact_", "pgfault", "nr_free_pages", "numa_")
    return {k: int(v) for k, v in pairs if k.startswith(keep)}


def steal_ms() -> float:
    fields = (read("/proc/stat") or "cpu 0").splitlines()[0].split()
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def system(args: argparse.Namespace) -> dict[str, Any]:
    cpus = os.sched_getaffinity(0)
    nodes = {}
    for d in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        nodes[d.name] = read(str(d / "cpulist"))
    thp = "/sys/kernel/mm/transparent_hugepage"
    groups = Path("/sys/kernel/iommu_groups")
    doc: dict[str, Any] = {
        "pid": os.getpid(),
        "uid": os.getuid(),
        "cpus": sorted(cpus),
        "siblings": {c: sorted(s) for c, s in cpu_siblings(cpus).items()},
        "numa_nodes": nodes,
        "thp": {k: read(f"{thp}/{k}") for k in ("enabled", "defrag", "hpage_pmd_size")}
        | {"khugepaged_defrag": read(f"{thp}/khugepaged/defrag")},
        "cmdline": read("/proc/cmdline"),
        "iommu_groups": len(list(groups.iterdir())) if groups.is_dir() else None,
        "driver": (read("/proc/driver/nvidia/version") or "").split("\n")[0] or None,
        "kernel": platform.release(),
    }
    if torch.cuda.is_available() and not args.dry_run:
        p = torch.cuda.get_device_properties(0)
        bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        doc["gpu_pci"] = bus
        doc["gpu_numa_node"] = read(f"/sys/bus/pci/devices/{bus}/numa_node")
    doc["buddy_at_start"] = buddy()
    if args.compact:
        t = time.perf_counter()
        try:
            Path("/proc/sys/vm/compact_memory").write_text("1\n")
            doc["compacted_seconds"] = round(time.perf_counter() - t, 3)
        except OSError as e:
            doc["compacted_seconds"] = None
            doc["compact_refused"] = str(e)
        doc["buddy_after_compact"] = buddy()
    return doc


def smaps_huge(address: int, nbytes: int) -> dict[str, int]:
    """``AnonHugePages`` and ``Rss`` of the mappings that overlap the range."""
    huge = rss = 0
    inside = False
    for line in (read("/proc/self/smaps") or "").splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo < address + nbytes and hi > address
        elif inside and head in ("AnonHugePages:", "Rss:"):
            kib = int(line.split()[1]) * 1024
            huge, rss = (huge + kib, rss) if head == "AnonHugePages:" else (huge, rss + kib)
    return {"anon_huge_bytes": huge, "rss_bytes": rss}


def numa(address: int, nbytes: int) -> dict[str, int] | str:
    """Pages per NUMA node, one page sampled every 2 MiB (``move_pages``, nodes NULL)."""
    if SYS_MOVE_PAGES is None:
        return "move_pages: unknown syscall number on this machine"
    pages = list(range(address, address + nbytes, bp.HUGE))
    arr, status = (ctypes.c_void_p * len(pages))(*pages), (ctypes.c_int * len(pages))()
    got = libc.syscall(SYS_MOVE_PAGES, 0, len(pages), arr, None, status, 0)
    if got < 0:
        return f"move_pages failed: errno {ctypes.get_errno()}"
    out: dict[str, int] = {}
    for s in status:
        out[str(s)] = out.get(str(s), 0) + 1  # a negative value: -errno (-2: not present)
    return out


def pagemap(address: int, nbytes: int, chunk: int) -> dict[str, Any]:
    """Physical frames of the range: contiguous runs, whole aligned 2 MiB frames, and the
    runs inside each chunk (None throughout where the frames read as zero)."""
    count = nbytes // 4096
    with open("/proc/self/pagemap", "rb") as f:
        raw = os.pread(f.fileno(), count * 8, address // 4096 * 8)
    v = torch.frombuffer(bytearray(raw), dtype=torch.int64)
    present = int((v < 0).sum())
    pfn = v & ((1 << 55) - 1)
    if present == 0 or int(pfn.max()) == 0:
        return {"present_pages": present, "readable": False}
    breaks = torch.ones_like(pfn, dtype=torch.bool)
    breaks[1:] = pfn[1:] != pfn[:-1] + 1
    blocks = (~breaks).view(-1, 512)[:, 1:].all(dim=1) & (pfn.view(-1, 512)[:, 0] % 512 == 0)
    per = chunk // 4096
    pad = (-count) % per
    runs = torch.cat([breaks, torch.zeros(pad, dtype=torch.bool)]).view(-1, per).sum(dim=1)
    return {
        "present_pages": present,
        "readable": True,
        "runs": int(breaks.sum()),
        "mean_run_mib": round(nbytes / int(breaks.sum()) / MIB, 3),
        "whole_2mib_frames_fraction": round(float(blocks.float().mean()), 4),
        "runs_per_chunk": runs.tolist(),
    }


def attributes(address: int, nbytes: int, chunk: int) -> dict[str, Any]:
    t = time.perf_counter()
    doc = {**smaps_huge(address, nbytes), "numa": numa(address, nbytes)}
    try:
        doc["pagemap"] = pagemap(address, nbytes, chunk) if nbytes % bp.HUGE == 0 else None
    except OSError as e:
        doc["pagemap"] = {"readable": False, "error": str(e)}
    doc["read_seconds"] = round(time.perf_counter() - t, 3)
    return doc


class MlockLib:
    """``--dry-run``: ``mlock`` for ``cudaHostRegister`` (the kernel's pinning only)."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}

    def cudaHostRegister(self, address: int, nbytes: int, flags: int) -> int:
        self.sizes[address] = nbytes
        return 0 if libc.mlock(address, nbytes) == 0 else ctypes.get_errno()

    def cudaHostUnregister(self, address: int) -> int:
        return libc.munlock(address, self.sizes.pop(address))


def call(lib: Any, address: int, nbytes: int, flags: int) -> tuple[float, ...]:
    """One registration, with the thread's own view around it."""
    cpu0, r0 = libc.sched_getcpu(), resource.getrusage(resource.RUSAGE_THREAD)
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    err = lib.cudaHostRegister(address, nbytes, flags)
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    r1, cpu1 = resource.getrusage(resource.RUSAGE_THREAD), libc.sched_getcpu()
    bp.check(err, f"cudaHostRegister({nbytes}, flags={flags})")
    return (
        (t1 - t0) / 1e6,
        (c1 - c0) / 1e6,
        r1.ru_nvcsw - r0.ru_nvcsw,
        r1.ru_nivcsw - r0.ru_nivcsw,
        cpu0,
        cpu1,
    )


def bind(pool: ThreadPoolExecutor, count: int, masks: list[set[int]]) -> None:
    """Every thread of the pool takes exactly one mask (a barrier holds each)."""
    barrier, left, lock = threading.Barrier(count), list(masks), threading.Lock()

    def one() -> None:
        with lock:
            mask = left.pop()
        os.sched_setaffinity(0, mask)
        barrier.wait()

    for f in [pool.submit(one) for _ in range(count)]:
        f.result()


class Probe:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a, self.n = args, args.bytes
        self.cpus = os.sched_getaffinity(0)
        self.pool = ThreadPoolExecutor(args.threads)
        self.registrars = [ThreadPoolExecutor(1) for _ in range(4)]
        if args.dry_run:
            self.lib: Any = MlockLib()
        else:
            torch.cuda.init()
            self.lib = bp.cudart()
            self.lib.cudaMallocHost.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            self.lib.cudaFreeHost.argtypes = [ctypes.c_void_p]
        bind(self.pool, args.threads, [self.cpus] * args.threads)  # every thread started
        warm = bp.map_huge(bp.HUGE, True)  # each registering thread warmed, off the clock
        bp.touch(warm, bp.HUGE, "memset")
        for r in self.registrars:
            r.submit(call, self.lib, warm, bp.HUGE, 1).result()
            r.submit(lambda: bp.check(self.lib.cudaHostUnregister(warm), "unregister")).result()
        bp.libc.munmap(warm, 2 * bp.HUGE)

    def mallochost(self) -> dict[str, Any]:
        if self.a.dry_run:
            return {"not_run": "no CUDA: cudaMallocHost has no stand-in"}
        ptr = ctypes.c_void_p()
        t = time.perf_counter()
        bp.check(self.lib.cudaMallocHost(ctypes.byref(ptr), self.n), "cudaMallocHost")
        alloc = time.perf_counter() - t
        attrs = attributes(int(ptr.value or 0), self.n, 64 * MIB)
        t = time.perf_counter()
        bp.check(self.lib.cudaFreeHost(ptr), "cudaFreeHost")
        return {
            "register_seconds": round(alloc, 5),
            "free_seconds": round(time.perf_counter() - t, 5),
            "attributes": attrs,
        }

    def register(self, spec: dict[str, Any]) -> dict[str, Any]:
        n, chunk, out = self.n, min(spec["chunk_mib"] * MIB, self.n), {}
        address = bp.map_huge(n, spec["huge"])
        tiles = [(o, min(chunk, n - o)) for o in range(0, n, chunk)]
        placed = placement(self.cpus, cpu_siblings(self.cpus), 1) if spec["core"] else None
        if placed:
            bind(self.pool, self.a.threads, [placed[1]] * self.a.threads)
            bind(self.registrars[0], 1, [set(placed[0])])
            out["register_cpus"], out["touch_cpus"] = placed[0], sorted(placed[1])
        elif spec["core"]:
            out["core_not_applied"] = f"{len(self.cpus)} CPUs are too few cores"
        touch = "memset" if spec["touch"] == "concurrent" else spec["touch"]
        t = time.perf_counter()
        touched: list[Future[float]] = [
            self.pool.submit(bp.touch, address + o, s, touch) for o, s in tiles
        ]
        if spec["touch"] != "concurrent":
            for f in touched:
                f.result()
            out["touch_seconds"] = round(time.perf_counter() - t, 4)
            out["attributes"] = attributes(address, n, chunk)
        k = spec["registrars"]
        groups = [
            list(range(len(tiles)))[i * len(tiles) // k : (i + 1) * len(tiles) // k]
            for i in range(k)
        ]

        def run(group: list[int]) -> list[tuple[float, ...]]:
            done = []
            for i in group:
                touched[i].result()
                done.append(call(self.lib, address + tiles[i][0], tiles[i][1], spec["flags"]))
            return done

        steal, t = steal_ms(), time.perf_counter()
        futures = [self.registrars[j].submit(run, g) for j, g in enumerate(groups)]
        calls = [c for f in futures for c in f.result()]
        out["register_seconds"] = round(time.perf_counter() - t, 5)
        out["steal_ms"] = round(steal_ms() - steal, 1)
        if spec["touch"] == "concurrent":
            out["touch_seconds"] = round(sum(f.result() for f in touched), 4)
            out["attributes"] = attributes(address, n, chunk)  # pinned: the frames stay
        names = ("ms", "cpu_ms", "vcsw", "ivcsw", "cpu_before", "cpu_after")
        out["calls"] = {name: [round(c[i], 3) for c in calls] for i, name in enumerate(names)}
        out["in_call_seconds"] = round(sum(c[0] for c in calls) / 1e3, 5)
        t = time.perf_counter()
        for o, _ in tiles:
            bp.check(self.lib.cudaHostUnregister(address + o), "cudaHostUnregister")
        out["unregister_seconds"] = round(time.perf_counter() - t, 4)
        bp.libc.munmap(address, n)
        if placed:
            bind(self.pool, self.a.threads, [self.cpus] * self.a.threads)
            bind(self.registrars[0], 1, [self.cpus])
        return out

    def condition(self, name: str) -> dict[str, Any]:
        spec = DEFAULT | CONDITIONS[name]
        before, vm = buddy(), vmstat()
        body = self.mallochost() if spec["kind"] == "mallochost" else self.register(spec)
        after = vmstat()
        changed = {k: after[k] - vm.get(k, 0) for k in after if after[k] != vm.get(k, 0)}
        return {
            "condition": name,
            "spec": spec,
            **body,
            "buddy_before": before,
            "vmstat_delta": changed,
        }


def order(names: list[str], shift: int) -> list[str]:
    """``base`` first, ``base-repeat`` last, the others rotated by ``shift``."""
    middle = [n for n in names if n not in ("base", "base-repeat")]
    k = shift % len(middle) if middle else 0
    ends = [n for n in ("base",) if n in names], [n for n in ("base-repeat",) if n in names]
    return ends[0] + middle[k:] + middle[:k] + ends[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=bp.size, default=bp.size("5GiB"))
    p.add_argument("--threads", type=int, default=12)
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--shift", type=int, default=0)
    p.add_argument("--compact", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--json", type=Path, required=True)
    a = p.parse_args()
    names = [c for c in a.conditions.split(",") if c]
    bad = [c for c in names if c not in CONDITIONS]
    if bad or a.bytes % bp.HUGE:
        p.exit(
            2,
            f"register_probe: --conditions takes {','.join(CONDITIONS)}; --bytes takes "
            "whole 2 MiB pages\n",
        )
    if not a.dry_run and not torch.cuda.is_available():
        p.exit(2, "register_probe: no CUDA device; use --dry-run for the plumbing (mlock)\n")
    start = time.perf_counter()
    doc: dict[str, Any] = {"bytes": a.bytes, "threads": a.threads, "dry_run": a.dry_run}
    if a.dry_run:
        doc["stand_in"] = "mlock for cudaHostRegister: the kernel's page-locking, not the driver's"
    doc["system"] = system(a)
    probe = Probe(a)
    doc["setup_seconds"] = round(time.perf_counter() - start, 2)
    doc["order"] = order(names, a.shift)
    doc["conditions"] = {}
    for name in doc["order"]:
        doc["conditions"][name] = probe.condition(name)
        a.json.write_text(json.dumps(doc) + "\n")
    doc["seconds"] = round(time.perf_counter() - start, 2)
    a.json.write_text(json.dumps(doc) + "\n")
    base = doc["conditions"].get("base", {})
    print(
        json.dumps(
            {"base_register_seconds": base.get("register_seconds"), "seconds": doc["seconds"]}
        )
    )


if __name__ == "__main__":
    main()
