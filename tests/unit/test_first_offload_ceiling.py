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


def _row(register_s, touch_s, wait_s, seconds, first_gbps, locked=5 * 10**9):
    stage = {
        "phase": "offload",
        "seconds": seconds,
        "locked_bytes": locked,
        "threads": 10,
        "touch_seconds": touch_s,
        "register_seconds": register_s,
        "first_copy_seconds": wait_s,
    }
    return {
        "strategy": "hugepin",
        "size": "5GiB",
        "first_offload_gbps": first_gbps,
        "stages": {"stages": [stage]},
    }


def test_a_target_not_met_names_the_stage_that_limited_the_row():
    row = _row(register_s=0.25, touch_s=1.0, wait_s=0.05, seconds=0.3, first_gbps=16.7)
    targets = bench.check_targets([row])
    (limit,) = bench.explain([row], targets)
    assert limit["limited_by"] == "cudaHostRegister (one thread)"
    assert limit["stage_gbps_in_pipeline"]["cudaHostRegister (one thread)"] == 20.0
    assert limit["stage_gbps_in_pipeline"]["first touch (10 threads)"] == 50.0  # wall rate
    assert limit["bound_gbps"] == pytest.approx(5 / 0.3, abs=0.01)  # the slowest + the wait
    touch_bound = _row(register_s=0.05, touch_s=4.0, wait_s=0.0, seconds=0.4, first_gbps=12.5)
    (limit,) = bench.explain([touch_bound], bench.check_targets([touch_bound]))
    assert limit["limited_by"] == "first touch (10 threads)"


def test_a_target_met_needs_no_explanation():
    row = _row(register_s=0.1, touch_s=1.0, wait_s=0.01, seconds=0.15, first_gbps=33.3)
    assert bench.explain([row], bench.check_targets([row])) == []


def test_the_first_chunk_counts_once_so_the_bound_holds_on_the_h200_row():
    """hugepin 5 GiB (h200-2026-12-01-first-offload.json): the first copy's wait already
    holds the first chunk's touch and registration; counted again in the stage's total,
    the bound read 20.61 GB/s under the 20.78 measured."""
    row = _row(
        register_s=0.22468697199997223,
        touch_s=1.819198482999866,
        wait_s=0.03588893299996698,
        seconds=0.2583342389999643,
        first_gbps=20.77,
        locked=5369243136,
    )
    row["stages"]["stages"][0].update(chunks=81, threads=14)
    (limit,) = bench.explain([row], bench.check_targets([row]))
    assert limit["limited_by"] == "cudaHostRegister (one thread)"
    assert limit["measured_gbps"] <= limit["bound_gbps"] <= 1.01 * limit["measured_gbps"]


def test_several_registrars_are_read_as_a_wall_rate_over_their_threads():
    row = _row(register_s=0.5, touch_s=1.0, wait_s=0.0, seconds=0.3, first_gbps=16.7)
    row["stages"]["settings"] = {"registrars": 2}
    (limit,) = bench.explain([row], bench.check_targets([row]))
    assert limit["stage_gbps_in_pipeline"]["cudaHostRegister (2 threads)"] == 20.0
