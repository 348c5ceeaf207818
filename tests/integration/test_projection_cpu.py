"""benchmarks/projection_validation.py runs on CPU: a smoke test of the H200 script.

The projection itself is checked against in-process measurements in test_run_cpu.py;
this only proves the script runs a real child and writes its JSON (one child).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, SUBPROCESS_TIMEOUT


def test_script_measures_and_projects_one_row(tmp_path):
    out = tmp_path / "projection.json"
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "projection_validation.py"),
            "--device", "cpu", "--sizes", "40MiB", "--strategies", "lazy",
            "--cycles", "1", "--train-steps", "0", "--jobs", "1", "--out", str(out),
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=SUBPROCESS_TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["emulated"] is True and doc["versions"]["torch"]
    (row,) = doc["rows"]
    assert row["strategy"] == "lazy" and row["size"] == "40MiB"
    assert row["payload_bytes"] == row["predicted_payload_bytes"], row
    assert abs(row["relative_error"]) <= 0.05, row
