"""Every model-parameter strategy on a real GPU (marker ``cuda``; skipped without CUDA).

Invariants with margins, each strategy in its own process (PyTorch's pinned cache
lives as long as the process).
"""

import pytest

pytestmark = pytest.mark.cuda

MODEL = ["--layers", "2", "--payload", "600MiB", "--seq-length", "64"]
STRATEGIES = ("naive", "lazy", "registered", "pageable")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.conftest import run_each

    found = run_each(
        tmp_path_factory.mktemp("cuda"), STRATEGIES, "--device", "cuda", "--cycles", "3", *MODEL
    )
    return {spec: doc["runs"][0] for spec, (doc, _) in found.items()}


def _pow2_ceil(n):
    return 1 << (n - 1).bit_length()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_round_trip_bit_exact_on_cuda(runs, strategy):
    assert runs[strategy]["summary"]["integrity_ok"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_offload_frees_param_and_grad_device_storage(runs, strategy):
    run = runs[strategy]
    freed_at_least = 0.9 * (run["payload_bytes"] + run["grad_bytes"])
    for cycle in run["cycles"]:
        offload = next(p for p in cycle["phases"] if p["phase"] == "offload")
        gpu = offload["gpu"]
        assert gpu["allocated_before"] - gpu["allocated_after"] >= freed_at_least


def test_naive_peaks_far_above_lazy(runs):
    naive, lazy = runs["naive"]["summary"], runs["lazy"]["summary"]
    assert naive["host_peak_x"] >= 2.5
    assert naive["host_peak_x"] >= lazy["host_peak_x"] + 1.0


def test_lazy_holds_the_power_of_two_rounded_copy(runs):
    run = runs["lazy"]
    rounded = _pow2_ceil(run["payload_bytes"])
    assert run["summary"]["pinned_reserved_bytes"] >= rounded
    assert run["summary"]["steady_host_bytes"] >= 0.9 * rounded


def test_registered_holds_the_exact_payload(runs):
    run = runs["registered"]
    assert run["summary"]["steady_host_x"] <= 1.05
    assert run["summary"]["pinned_reserved_bytes"] >= run["payload_bytes"]
    assert run["summary"]["pinned_reserved_bytes"] < _pow2_ceil(run["payload_bytes"])


def test_pinned_copies_beat_pageable(runs):
    assert runs["lazy"]["summary"]["offload_gbps"] > runs["pageable"]["summary"]["offload_gbps"]
    assert runs["registered"]["summary"]["load_gbps"] > runs["pageable"]["summary"]["load_gbps"]
