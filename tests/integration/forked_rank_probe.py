"""A user strategy that records, in the rank it runs in, what that process is (for
test_forked_ranks_cpu): its command line and its parent's, its session, signals, stdin,
intra-op threads, its RSS and its parent's, how many of its pages are still shared
copy-on-write, where torch's elastic agent keeps its error file, and its memory cgroup
and its parent's. Written at its first offload to ``rank<RANK>.json`` in its working
directory (the test's folder: a rank works where its parent does)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import torch

from offloadprobe.engine import forking
from tests.integration.user_strategies import KeepOnHost


def _status(pid: int | str) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) * 1024
    return found


def _memory_cgroup(pid: int | str) -> str | None:
    """The process's memory cgroup, as the kernel lists it (v1's memory line, else v2's)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)


def _cmdline(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]


def _shared_bytes() -> int:
    """Bytes of this process's private pages still shared copy-on-write (the kernel's
    zero pages aside), read from its own pagemap; mappings of a GiB or more (CPU
    emulation's ballast reserves a TiB, made after the fork) are left out."""
    zero, total = forking.zero_pfns(), 0
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for start, end, perms, _ in forking.mappings():
            if perms[3] != "p" or end - start >= 2**30:
                continue
            pagemap.seek(start // forking.PAGE * 8)
            entries = np.frombuffer(pagemap.read((end - start) // forking.PAGE * 8), np.uint64)
            total += sum(n for _, n in forking.shared_runs(entries, zero))
    return total * forking.PAGE


class RecordsItsProcess(KeepOnHost):
    def __init__(self) -> None:
        super().__init__()
        self.recorded = False

    def offload(self, models):
        if not self.recorded:
            self.recorded = True
            parent = os.getppid()
            facts = {
                "pid": os.getpid(),
                "sid": os.getsid(0),
                "cmdline": _cmdline("self"),
                "parent_cmdline": _cmdline(parent),
                "rss": _status("self"),
                "parent_rss": _status(parent),
                "shared_bytes": _shared_bytes(),
                "sigterm_default": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
                "stdin": os.readlink("/proc/self/fd/0"),
                "process": multiprocessing.current_process().name,
                "threads": torch.get_num_threads(),
                "omp": os.environ.get("OMP_NUM_THREADS"),
                "error_file": os.environ.get("TORCHELASTIC_ERROR_FILE"),
                "memory_cgroup": _memory_cgroup("self"),
                "parent_memory_cgroup": _memory_cgroup(parent),
            }
            rank = os.environ.get("RANK", "?")
            Path(f"rank{rank}.json").write_text(json.dumps(facts))
        super().offload(models)
