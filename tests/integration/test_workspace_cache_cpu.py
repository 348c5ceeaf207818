"""``--workspace-cache BYTES``: the probe model's forward fills a module-level cache of
device tensors no parameter references (TransformerEngine's FP8 workspaces, verl #6952).
A strategy that offloads every part but leaves the cache is "not offloaded" by default,
named by the device ledger with the cache's bytes and when it was made; one that frees
the cache is ok. In process, CPU emulation, the tiny model (the emulated device's own
total is the ledger's truth; on a GPU, ``tests/gpu/test_device_hidden_cuda.py``)."""

from __future__ import annotations

import json

from offloadprobe.core.units import format_bytes
from tests.conftest import TINY, with_flags

SMALLEST = with_flags(TINY, hidden="128", vocab="512")
"""TINY at its smallest width: what is tested here is a verdict, not a magnitude."""

MiB = 2**20
CACHE = 64 * MiB


def _run(invoke, tmp_path, strategy: str, *args: str):
    out = tmp_path / "run.json"
    args = ("--workspace-cache", "64MiB", *args, "--no-progress", "--json", str(out))
    result = invoke("run", "--strategy", strategy, *SMALLEST, *args)
    return result, json.loads(out.read_text())["runs"][0]


def test_a_workspace_cache_left_behind_is_not_offloaded(invoke, tmp_path):
    result, run = _run(invoke, tmp_path, "lazy")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    (fact,) = run["residency"]
    made = fact["unreferenced"]["made during train"]
    # the cache, and at most a little of the framework's own made in the first forward
    # (megatron's global memory buffer: 8 KiB at this size)
    assert CACHE <= made <= CACHE + MiB // 8, made
    assert fact["param_bytes_left"] == 0
    assert (
        f"unreferenced device tensors {format_bytes(made)}, made during train" in (run["verdict"])
    )
    assert "no part owns" in " ".join(result.stdout.split())


def test_freeing_the_cache_on_offload_is_ok(invoke, tmp_path):
    frees = "tests.integration.workspace_strategies:LazyFreesWorkspaces"
    result, run = _run(invoke, tmp_path, frees)
    assert run["outcome"]["kind"] == "ok", run["verdict"]
    assert result.exit_code == 0, result.stdout
    (fact,) = run["residency"]
    assert sum(fact["unreferenced"].values()) < MiB
