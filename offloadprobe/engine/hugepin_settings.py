"""How ``hugepin``'s and ``relock``'s chunk pipeline runs: its threads, chunk size, page
size and first-touch method, from ``--strategy-option`` pairs. Torch-free."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from offloadprobe.core.errors import UsageError
from offloadprobe.engine import hostmem

OPTIONS = (
    "threads",
    "registrars",
    "touch_first",
    "chunk_mib",
    "first_chunk_mib",
    "huge_pages",
    "touch",
    "stages",
    "register_core",
)
CHUNK_MIB = 64
"""Measured best on the H200 (12 threads: 26.2 GB/s at 64 MiB, 25.1 at 32, 19.8 at 256)."""
FIRST_CHUNK_MIB = 4
"""The first source's chunks ramp up from this size, doubling to ``CHUNK_MIB``: the first
copy waits for one 4 MiB chunk, not 64 MiB (bare pipeline on the H200: 2-4 ms against
17-37 ms before the first copy; first offload median 26.1 GB/s over six runs against
24.9; ``benchmarks/results/h200-2026-12-03-first-offload-limits.json``)."""
TOUCH = "memset"
"""First touch by writing: in the bare pipeline on the H200 ``memset`` read 22.3, 22.6
and 26.3 GB/s against ``MADV_POPULATE_WRITE``'s 20.0, 20.9 and 23.1 (``populate`` holds
the mmap lock for each chunk's whole fault-in, which the registering thread's
``cudaHostRegister`` needs too: the likely cause, not measured apart)."""
REGISTRARS = 1
"""One registering thread: on the H200 more are slower in total (the driver serialises
``cudaHostRegister``: 55 GB/s on one thread, 33 on two, 44 on four;
benchmarks/results/h200-2026-12-01-hugepin-sweep.json)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """How the pipeline runs: its threads, chunk size, page size and first-touch method."""

    threads: int
    chunk_bytes: int
    first_chunk_bytes: int | None = None
    """The first source's first chunk; its chunks double from it to ``chunk_bytes``
    (None: every chunk ``chunk_bytes``)."""
    registrars: int = REGISTRARS
    """Threads calling ``cudaHostRegister``, each on its own chunks, beside the touching ones."""
    touch_first: bool = False
    """Fault in every chunk before the first registration (else each chunk is registered
    as soon as it is touched, while the threads touch the next ones)."""
    huge_pages: bool = True
    touch: str = TOUCH
    stages: str | None = None
    """Where ``close()`` writes the stage timings (JSON), if anywhere."""
    register_core: bool = False
    """Each registering thread bound to a core of its own, the touch threads to the other
    cores (``placement``): the registration is not shared with a touching sibling. Off by
    default until ``benchmarks/register_spread.py`` measured it on the H200."""

    @classmethod
    def from_options(
        cls, options: Mapping[str, str] | None = None, *, local_ranks: int | None = None
    ) -> Settings:
        """From ``--strategy-option`` pairs; threads default to the CPUs this process may
        use, shared with the other ranks of its node (torchrun's ``LOCAL_WORLD_SIZE``)."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UsageError(
                f"--strategy-option {unknown[0]}: hugepin and relock take " + ", ".join(OPTIONS)
            )
        if local_ranks is None:
            local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or "1")
        threads = hostmem.worker_threads(hostmem.available_cpus(), local_ranks)
        hpage = hostmem.huge_page_size()
        try:
            threads = int(options.get("threads") or threads)
            registrars = int(options.get("registrars") or REGISTRARS)
            chunk = int(options.get("chunk_mib") or CHUNK_MIB) * 2**20
            first = int(options.get("first_chunk_mib", FIRST_CHUNK_MIB) or 0) * 2**20
        except ValueError:
            raise UsageError(
                "--strategy-option threads=, registrars=, chunk_mib= and first_chunk_mib= "
                "take integers"
            ) from None
        chunk = max(hpage, -(-chunk // hpage) * hpage)  # whole huge pages
        first = min(chunk, max(hpage, -(-first // hpage) * hpage)) if first > 0 else chunk
        touch = options.get("touch") or TOUCH
        if touch not in hostmem.TOUCH_METHODS:
            raise UsageError(
                f"--strategy-option touch={touch!r}: choose one of {hostmem.TOUCH_METHODS}"
            )
        return cls(
            threads=max(1, threads),
            registrars=max(1, registrars),
            touch_first=_flag(options, "touch_first", default=False),
            chunk_bytes=chunk,
            first_chunk_bytes=first if first < chunk else None,
            huge_pages=_flag(options, "huge_pages", default=True),
            touch=touch,
            stages=options.get("stages") or None,
            register_core=_flag(options, "register_core", default=False),
        )


ON, OFF = ("1", "true", "yes"), ("0", "false", "no")


def _flag(options: Mapping[str, str], key: str, *, default: bool) -> bool:
    """``--strategy-option KEY=1|true|yes`` or ``0|false|no``; absent: ``default``."""
    value = options.get(key)
    if value is None:
        return default
    if value.lower() not in ON + OFF:
        raise UsageError(f"--strategy-option {key}={value!r}: choose 1 or 0")
    return value.lower() in ON


def placement(
    cpus: set[int], siblings: Mapping[int, set[int]], registrars: int
) -> tuple[list[int], set[int]] | None:
    """The CPUs for ``register_core``: one CPU for each registering thread, each on a core
    (its hyperthread siblings, ``siblings[cpu]``) that the touch threads' CPUs leave out;
    the cores taken are the last ones. None where fewer cores than ``registrars + 1``."""
    cores: list[set[int]] = []
    for cpu in sorted(cpus):
        core = (siblings.get(cpu) or {cpu}) & cpus | {cpu}
        if core not in cores:
            cores.append(core)
    if len(cores) < registrars + 1:
        return None
    taken = cores[-registrars:]
    return [min(core) for core in taken], cpus - set().union(*taken)


def place_threads(
    touching: ThreadPoolExecutor, registering: ThreadPoolExecutor, settings: Settings
) -> str:
    """``register_core``: bind each registering thread to a CPU of a core of its own and
    every touch thread to the CPUs of the other cores; says what it did, for the notes."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = set()
    found = placement(cpus, cpu_siblings(cpus), settings.registrars) if cpus else None
    if found is None:
        return f"hugepin: register_core not applied, {len(cpus)} CPUs are too few cores"
    chosen, others = found
    free, lock = list(chosen), threading.Lock()

    def bind(barrier: threading.Barrier, mask: set[int] | None) -> None:
        if mask is None:
            with lock:
                mask = {free.pop()}
        os.sched_setaffinity(0, mask)  # the calling thread only (Linux)
        barrier.wait()  # every thread of the pool takes exactly one

    for pool, count, mask in (
        (touching, settings.threads, others),
        (registering, settings.registrars, None),
    ):
        barrier = threading.Barrier(count)
        for f in [pool.submit(bind, barrier, mask) for _ in range(count)]:
            f.result()
    return (
        f"hugepin: registering on CPU {', '.join(map(str, chosen))}, touching on "
        f"{len(others)} CPUs of other cores"
    )


def cpu_siblings(cpus: set[int], root: str = "/sys/devices/system/cpu") -> dict[int, set[int]]:
    """Each CPU's hyperthread siblings (``topology/thread_siblings_list``); a CPU whose
    list cannot be read is a core of its own."""
    out: dict[int, set[int]] = {}
    for cpu in cpus:
        try:
            with open(f"{root}/cpu{cpu}/topology/thread_siblings_list") as f:
                out[cpu] = _cpu_list(f.read())
        except (OSError, ValueError):
            out[cpu] = {cpu}
    return out


def _cpu_list(text: str) -> set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def check_options(options: Mapping[str, str]) -> None:
    """``hugepin``'s and ``relock``'s options, checked in the parent (``UsageError``)."""
    Settings.from_options(options, local_ranks=1)
