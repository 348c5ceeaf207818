"""mcore, pipelined and tms on a real GPU (marker ``cuda``; skipped without CUDA).

Each strategy in its own process; invariants with margins. ``tms`` is skipped where
torch_memory_saver is not installed (``pip install 'offloadprobe[tms]'``).
"""

import importlib.util

import pytest

pytestmark = pytest.mark.cuda

MODEL = ["--layers", "2", "--payload", "600MiB", "--seq-length", "64"]
HAS_TMS = importlib.util.find_spec("torch_memory_saver") is not None
STRATEGIES = ("mcore", "pipelined", *(("tms",) if HAS_TMS else ()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.conftest import run_each

    found = run_each(
        tmp_path_factory.mktemp("field"),
        STRATEGIES,
        "--device",
        "cuda",
        "--cycles",
        "3",
        "--no-reference-check",
        *MODEL,
    )
    return {spec: doc["runs"][0] for spec, (doc, _) in found.items()}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_round_trip_bit_exact_on_cuda(runs, strategy):
    assert runs[strategy]["summary"]["integrity_ok"]


def test_mcore_first_offload_holds_a_pageable_and_a_pinned_copy(runs):
    run = runs["mcore"]
    offloads = [p for c in run["cycles"] for p in c["phases"] if p["phase"] == "offload"]
    first, later = offloads[0]["host"], offloads[-1]["host"]
    assert first["peak"] - first["rss_before"] >= 1.8 * run["payload_bytes"]
    assert later["peak"] - later["rss_before"] <= 0.2 * run["payload_bytes"]


def test_pipelined_holds_the_exact_payload_registered(runs):
    s = runs["pipelined"]["summary"]
    assert s["steady_host_x"] <= 1.05
    assert s["pinned_reserved_bytes"] >= runs["pipelined"]["payload_bytes"]


@pytest.mark.skipif(not HAS_TMS, reason="torch_memory_saver not installed")
def test_tms_gives_the_driver_the_buffers_back(runs):
    run = runs["tms"]
    for cycle in run["cycles"]:
        phases = {p["phase"]: p for p in cycle["phases"]}
        freed = phases["train"]["gpu"]["device_used_after"]
        freed -= phases["offload"]["gpu"]["device_used_after"]
        assert freed >= 0.9 * (run["payload_bytes"] + run["grad_bytes"])
