"""How ``hugepin``'s and ``relock``'s chunk pipeline runs: its threads, chunk size, page
size and first-touch method, from ``--strategy-option`` pairs. Torch-free."""

from __future__ import annotations

import os
from collections.abc import Mapping
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


def check_options(options: Mapping[str, str]) -> None:
    """``hugepin``'s and ``relock``'s options, checked in the parent (``UsageError``)."""
    Settings.from_options(options, local_ranks=1)
