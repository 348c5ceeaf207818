"""CPU emulation and glibc's malloc (issue 35, point 10): glibc's own behaviour by default,
the fixed threshold only when asked (each in a fresh interpreter: this session fixes the
threshold for its own runs, ``conftest``), and a device allocation never takes free host
heap pages out of the host figure where it can tell.

The truths are glibc's and the kernel's own: ``mallinfo2``'s count of mapped blocks (is
a block a mapping of its own, or from the heap?) and ``mincore`` residency."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from offloadprobe.engine.runtime import emulation
from offloadprobe.engine.runtime.device_memory import rss

KIB, MIB = 1 << 10, 1 << 20


def clean_env() -> dict[str, str]:
    """This session's environment without glibc's threshold variables (``conftest`` fixes
    the threshold for the session's own runs)."""
    fixing = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
    return {k: v for k, v in os.environ.items() if k not in (*fixing, "MALLOC_MMAP_MAX_")}


@pytest.mark.parametrize(("mode", "moves"), [("real", "True"), ("fixed", "False")])
def test_the_emulation_keeps_glibcs_dynamic_threshold_unless_asked(mode, moves):
    """In a fresh interpreter each (glibc cannot undo a fixed threshold), without torch:
    the emulated device's own call (``glibc_malloc.enter``), then glibc's counters."""
    from tests.conftest import ROOT

    out = subprocess.run(
        [sys.executable, "-m", "tests.unit.glibc_probe", mode],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=clean_env(),
    )
    assert out.stdout.split() == [moves], out.stderr


def test_the_emulated_device_leaves_the_threshold_alone_by_default(monkeypatch):
    from offloadprobe.engine.runtime import glibc_malloc

    def refuse() -> bool:
        raise AssertionError("the default mode fixed glibc's threshold")

    monkeypatch.setattr(glibc_malloc, "fix_malloc_threshold", refuse)
    with emulation.emulated_device():
        pass


def test_a_threshold_fixed_before_the_run_is_said_so():
    from offloadprobe.engine.runtime import glibc_malloc

    # (this session fixes it: conftest; and so would a user's variable or tunable)
    assert "MALLOC_MMAP_THRESHOLD_" in glibc_malloc.note("real")
    tunable = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}
    assert "GLIBC_TUNABLES" in glibc_malloc.note("real", tunable)
    assert glibc_malloc.fixed_before({}) is not None  # this process called mallopt itself
    assert glibc_malloc.note("fixed") == glibc_malloc.NOTES["fixed"]


def test_an_unwritten_device_allocation_leaves_free_host_heap_pages_host_memory():
    """GIVEN free heap blocks a host free left resident (under 128 KiB: heap blocks under
    either threshold), WHEN a device tensor is allocated (``torch.empty``, not yet written)
    and glibc serves it from them, THEN the host figure (RSS less the emulated device's
    constant) does not move, at the allocation or at the device free: on a GPU those pages
    stay resident host memory. (Counted as device pages, it fell 64 KiB each time.)"""
    with emulation.emulated_device() as memory:
        emulation.trim_host_heap()
        moves, kept = [], []
        for _ in range(6):
            blocks = [torch.ones(64 * KIB // 4) for _ in range(16)]  # written heap blocks
            del blocks  # freed side by side: one resident free chunk
            before, was = rss() - memory.constant, _kept(memory)
            device = torch.empty(96 * KIB // 4, device="cuda")
            moves.append(rss() - memory.constant - before)
            kept.append(_kept(memory) - was)
            device.untyped_storage().resize_(0)
            moves.append(rss() - memory.constant - before)
            memory.reclaim()
        steady = moves[2:]  # the first round also grows the registry's own structures
        assert all(abs(m) <= 16 * KIB for m in steady), [m // KIB for m in moves]
        if not sum(kept):  # the case under test did not arise: this process's heap, after
            # the tests before it in the same worker, served no device block from free pages
            pytest.skip("glibc served no device allocation from free host pages here")


def _kept(memory) -> int:
    """Free host heap bytes device allocations kept as host pages (the registry's count)."""
    recycling = getattr(memory, "recycling", None)
    return recycling.kept_bytes if recycling is not None else 0


def test_a_bad_mode_is_refused_in_one_line(invoke, fake_runner):
    result = invoke("run", "--device", "cpu", "--emulation-malloc", "glibc")
    assert result.exit_code == 2
    assert "--emulation-malloc must be real or fixed" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_mode_reaches_the_run_from_every_verb(invoke, fake_runner):
    assert invoke("run", "--device", "cpu", "--emulation-malloc", "fixed").exit_code == 0
    assert fake_runner.last.emulation_malloc == "fixed"
    assert invoke("run", "--device", "cpu").exit_code == 0
    assert fake_runner.last.emulation_malloc == "real"  # the default: glibc's own
    from offloadprobe.core.options import BY_NAME, COMPARE, PLUGIN, SCENARIO

    assert {COMPARE, PLUGIN, SCENARIO} <= BY_NAME["emulation_malloc"].verbs
