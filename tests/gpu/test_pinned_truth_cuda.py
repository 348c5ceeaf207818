"""On the GPU: pinned by fact sees page-locking from any thread, and pinned "in use" stays
flat over the cycles of a strategy that reuses PyTorch's cached pinned blocks (issue 35,
point 10; ``tests/gpu/pinned_truth_strategies.py``).

The truths: the bytes a thread pool page-locked are the strategy's mappings, one exact
copy of the payload each (rounded up to pages); the blocks a fresh-copy-each-offload
strategy holds in use are one payload's block after every offload, the same each cycle.
torch 2.11's ``active_bytes.current`` climbed 1x, 2x, 3x on such a strategy (the H200,
2026-12-03)."""

from __future__ import annotations

import json

import pytest

from offloadprobe.core import pinned_stats

pytestmark = pytest.mark.cuda

MiB = 2**20
STRATEGIES = "tests.gpu.pinned_truth_strategies:"
RUN = ["run", "--device", "cuda", "--layers", "1", "--payload", "16MiB", "--train-steps", "0"]
RUN += ["--no-reference-check", "--no-progress"]
RUNTIME = 8 * MiB
"""The CUDA runtime's own page-locked buffers CUPTI's records add (4.5 MiB on the H200)."""


def _run(cli, tmp_path, name: str, cycles: int):
    out = tmp_path / f"{name}.json"
    proc = cli(*RUN, "--cycles", str(cycles), "--strategy", STRATEGIES + name, "--json", str(out))
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())


def _phases(run: dict, phase: str) -> list[dict]:
    return [p for c in run["cycles"] for p in c["phases"] if p["phase"] == phase]


@pytest.mark.parametrize("name", ["PoolRegisterCtypes", "PoolRegisterTorch"])
def test_page_locking_from_a_thread_pool_is_pinned_by_fact(cli, tmp_path, name):
    proc, report = _run(cli, tmp_path, name, cycles=2)
    run = report["runs"][0]
    assert proc.returncode == 0, proc.stderr + proc.stdout
    s = run["summary"]
    assert s["pinned_source"] == "cupti", (s, run["notes"])
    locked = run["payload_bytes"]  # one page-aligned mapping per DDP buffer, all locked
    pages = MiB  # each mapping rounded up to whole pages: a few buffers' worth at most
    for offload in _phases(run, "offload"):  # every cycle, not the last alone
        pinned = offload["pinned"]
        allocator = pinned["reserved_after"]
        assert locked <= pinned["locked_after"] <= locked + pages + allocator + RUNTIME, pinned
    assert s["pinned_declared_bytes"] == 0  # nothing declared: the figure is by fact
    assert locked <= s["pinned_reserved_bytes"], s


def test_pinned_in_use_stays_flat_when_cached_blocks_are_reused(cli, tmp_path):
    proc, report = _run(cli, tmp_path, "FreshPinnedEachOffload", cycles=3)
    run = report["runs"][0]
    assert proc.returncode == 0, proc.stderr + proc.stdout
    offloads, loads = _phases(run, "offload"), _phases(run, "load")
    owned = [p["pinned"]["reserved_after"] for p in offloads]
    # the block is reused (on the H200 the owned figure moved by one byte between cycles:
    # torch 2.11's freed counter, 2026-12-03)
    assert max(owned) - min(owned) <= MiB and min(owned) >= run["payload_bytes"], owned
    in_use = [p["pinned"]["in_use_after"] for p in offloads]
    after_loads = [p["pinned"]["in_use_after"] for p in loads]
    if not pinned_stats.counts_frees(report["versions"].get("torch")):
        # this torch's counters only climb: no figure rather than a wrong one, and said
        assert set(in_use) == set(after_loads) == {None}, (in_use, after_loads)
        assert any("pinned in use: not read" in n for n in run["notes"]), run["notes"]
        return
    assert max(in_use) - min(in_use) <= MiB, in_use  # flat: one block each cycle
    assert min(in_use) >= run["payload_bytes"], in_use  # the copies held their blocks
    # after a load the block stays counted until PyTorch sees its copy's event complete
    # (at its next pinned allocation): at most the same block, never more
    assert all(u <= o for u, o in zip(in_use + after_loads, owned * 2, strict=True))
