"""On the GPU: a strategy that claims a release through the driver is believed only for
device memory the driver got back. PyTorch's reserved bytes are no such evidence: a
``MemPool`` over a pluggable allocator reserves whatever its allocator hands it.

Written in the third session of 2026-12-01; first run on the H200 in the fourth, where
the strategy's first form crashed the run (the run's deterministic mode filled the new
tensor: a kernel wrote to a host address), now turned off around its allocation."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.cuda

CLAIMS = "tests.gpu.driver_claim_strategies:"
RUN = ["run", "--device", "cuda", "--layers", "1", "--payload", "16MiB", "--cycles", "2"]
RUN += ["--no-reference-check", "--no-progress"]


def test_reserved_bytes_nothing_backs_confirm_no_release_on_cuda(cli, tmp_path):
    out = tmp_path / "run.json"
    proc = cli(*RUN, "--strategy", CLAIMS + "ReservesWhatNothingBacks", "--json", str(out))
    assert out.exists(), proc.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["outcome"]["kind"] != "crashed", run["outcome"]  # the trick ran
    claimed = run["payload_bytes"] + run["grad_bytes"]
    for cycle in run["cycles"]:  # the trick is in place: reserved grew, the driver gave nothing
        phases = {p["phase"]: p["gpu"] for p in cycle["phases"]}
        train, offload = phases["train"], phases["offload"]
        assert offload["reserved_after"] - train["reserved_after"] >= claimed, phases
        assert train["device_used_after"] - offload["device_used_after"] < claimed // 2, phases
    assert proc.returncode == 1, proc.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    assert run["residency"][0]["param_bytes_left"] >= run["payload_bytes"], run["residency"]
