"""The projection against measurement in CPU emulation, through the benchmark script."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

SIZES = ["48MiB", "60MiB", "68MiB"]


def test_projected_host_peak_within_5_percent(tmp_path):
    out = tmp_path / "projection.json"
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "projection_validation.py"),
            "--device", "cpu", "--sizes", *SIZES, "--strategies", "naive", "lazy",
            "--cycles", "2", "--train-steps", "0", "--jobs", "2", "--out", str(out),
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["emulated"] is True and doc["versions"]["torch"]
    rows = doc["rows"]
    assert sorted({r["size"] for r in rows}) == sorted(SIZES)
    for row in rows:
        assert row["payload_bytes"] == row["predicted_payload_bytes"], row
        assert abs(row["relative_error"]) <= 0.05, row
    naive = [r for r in rows if r["strategy"] == "naive"]
    # naive holds three payloads at its peak (previous copy + two clones) from cycle 1 on
    for row in naive:
        assert 2.9 < row["measured_host_peak_bytes"] / row["payload_bytes"] < 3.1
