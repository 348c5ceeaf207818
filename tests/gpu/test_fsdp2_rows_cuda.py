"""On the GPU, rank 7 of 8 through the fake process group (``benchmarks/fsdp2_rows.py``,
each row in a fresh process): verl's FSDP2 offload holds its shards' pinned blocks
rounded up to a power of two and keeps them after the load; an uneven shard loses its
pinning to FSDP2's padded pageable copy; the exact-size arena holds the payload once.

The truth: CUDA's own answer about each host page (``is_pinned``), PyTorch's host
allocator's owned bytes, the kernel's VmHWM and RSS, and device-side fingerprints by key.
The payload is 8 x Linear(3584, 18944) shards plus both moments: 0.78 GiB per rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fsdp2_rows.py"


def _rows(tmp_path: Path, shapes: str, rows: str) -> dict[str, dict]:
    out = tmp_path / "rows.json"
    args = ["--shapes", shapes, "--layers", "8", "--shards", "8", "--cycles", "2"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *args, "--rows", rows, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert out.exists(), done.stdout + done.stderr
    return {row["row"]: row for row in json.loads(out.read_text())["rows"]}


def test_verl_rounds_and_holds_the_fix_does_not(tmp_path) -> None:
    rows = _rows(tmp_path, "linear:18944x3584", "verl_fsdp2,exact")
    verl, exact = rows["verl_fsdp2"], rows["exact"]
    assert verl["bit_exact"] and exact["bit_exact"]
    steady = verl["cycles"][1]
    assert steady["pinned_after_offload"] == steady["shards"] == 8 * 2 * 3
    assert 1.90 <= steady["locked_x"] <= 2.02  # 32.4 MiB shards in 64 MiB blocks
    assert steady["held_after_load_x"] >= 1.90  # cached, page-locked, after the load
    projected = verl["projected_verl_fsdp2"]["pinned_x"]
    assert steady["locked_x"] == pytest.approx(projected, rel=0.05)  # plan's figure
    fixed = exact["cycles"][1]
    assert fixed["pinned_after_offload"] == fixed["shards"]
    assert fixed["host_peak_x"] <= 1.02 and fixed["held_after_load_x"] <= 1.02
    assert fixed["locked_x"] <= 1.02
    assert (
        fixed["device_allocated_after_offload"] < steady["device_allocated_after_offload"] + 2**20
    )


def test_uneven_shards_lose_their_pinning_on_the_last_rank(tmp_path) -> None:
    """18943 rows at 8 shards: rank 7 holds 2367 of a 2368-row chunk, weight and bias."""
    rows = _rows(tmp_path, "linear:18943x3584", "verl_fsdp2,exact")
    verl, exact = rows["verl_fsdp2"], rows["exact"]
    assert verl["bit_exact"] and exact["bit_exact"]
    steady = verl["cycles"][1]
    assert steady["shards"] == 48 and steady["pinned_after_offload"] == 32  # moments only
    assert verl["projected_verl_fsdp2"]["uneven"] == 16
    assert steady["host_peak_x"] == pytest.approx(1.65, rel=0.05)
    assert exact["cycles"][1]["pinned_after_offload"] == 48  # the fix keeps every shard's
