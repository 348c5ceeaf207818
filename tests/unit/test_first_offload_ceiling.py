"""The first-offload benchmark's ceiling from its component rates (benchmarks/): the
slowest stage bounds an overlapped pipeline, the serial sum one without overlap; where
registration was measured while the pool faults in pages, that rate stands for it."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "first_offload.py"
spec = importlib.util.spec_from_file_location("first_offload", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

TOUCH = {"rows": [{"huge": True, "fresh_gbps": 50.0}], "after_idle": {"gbps": 48.0}}


def test_the_slowest_stage_bounds_the_first_offload():
    chunked = {"register_gbps": 40.0, "d2h_gbps": 55.0}
    found = bench.ceiling({"touch": TOUCH, "touched-huge": {"chunked": chunked}})
    first = found["first_offload"]
    assert first["gbps"] == 40.0 and first["limited_by"].startswith("cudaHostRegister")
    assert first["serial_gbps"] == pytest.approx(1 / (1 / 50 + 1 / 40 + 1 / 55), abs=0.01)


def test_registration_under_page_faults_stands_for_registration_alone():
    chunked = {"register_gbps": 40.0, "d2h_gbps": 55.0, "register_while_touching_gbps": 16.0}
    found = bench.ceiling({"touch": TOUCH, "touched-huge": {"chunked": chunked}})
    first = found["first_offload"]
    assert first["gbps"] == 16.0 and "while the pool touches" in first["limited_by"]
    assert first["serial_gbps"] == pytest.approx(1 / (1 / 50 + 1 / 16 + 1 / 55), abs=0.01)
    # relock's later offloads touch (after release) and register at once too
    assert found["relock_later_offloads"]["gbps"] == 16.0
